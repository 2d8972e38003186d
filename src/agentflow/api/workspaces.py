"""``/api/workspaces``: the tenants (issue 15). A key sees its own workspace; the server's
administrators (requests without a key where the server trusts them, and admin keys of the
default workspace) see, create and rename them all. A workspace's own admins rename it."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel, ConfigDict, Field

from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES, conflict
from agentflow.core.access_keys import NAME_PATTERN
from agentflow.core.errors import ForbiddenError, NotFoundError
from agentflow.core.ids import DEFAULT_WORKSPACE

router = APIRouter(prefix="/api/workspaces", tags=["keys"], responses={**ERROR_RESPONSES})


class Workspace(BaseModel):
    """A tenant."""

    id: UUID
    name: str
    created_at: datetime


class WorkspaceList(BaseModel):
    """Workspaces by name."""

    workspaces: list[Workspace]


class WorkspaceIn(BaseModel):
    """A workspace's name."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100, pattern=NAME_PATTERN, examples=["acme support"])


class CreatedWorkspace(Workspace):
    """A new workspace: ``api_key`` is its first admin key, shown this once."""

    api_key: str


def _server_admin(request: Request, workspace: UUID) -> bool:
    return not request.state.keyed or (workspace == DEFAULT_WORKSPACE and request.state.role == "admin")


@router.get("", response_model=WorkspaceList, summary="List workspaces")
async def list_workspaces(request: Request, engine: EngineDep, workspace: WorkspaceDep) -> WorkspaceList:
    """Every workspace for the server's administrators; a key's own otherwise."""
    if _server_admin(request, workspace):
        return WorkspaceList(workspaces=[Workspace(**w) for w in await engine.workspaces.list()])
    return WorkspaceList(workspaces=[Workspace(**await engine.workspaces.get(workspace))])


@router.post(
    "",
    response_model=CreatedWorkspace,
    status_code=201,
    summary="Create a workspace",
    responses=conflict("`workspace_name_taken`"),
)
async def create_workspace(
    request: Request, engine: EngineDep, workspace: WorkspaceDep, body: Annotated[WorkspaceIn, Body()]
) -> CreatedWorkspace:
    """A new workspace with its first admin API key; 409 ``workspace_name_taken``; 403
    ``not_server_admin`` for a key of another workspace than the default one."""
    if not _server_admin(request, workspace):
        raise ForbiddenError(
            "not_server_admin",
            "only the server's administrators create workspaces",
            solution="Use an admin key of the default workspace, or the server's own host.",
        )
    created, token = await engine.workspaces.create(body.name)
    return CreatedWorkspace(**created, api_key=token)


@router.patch(
    "/{workspace_id}",
    response_model=Workspace,
    summary="Rename a workspace",
    responses=conflict("`workspace_name_taken`"),
)
async def rename_workspace(
    workspace_id: UUID,
    request: Request,
    engine: EngineDep,
    workspace: WorkspaceDep,
    body: Annotated[WorkspaceIn, Body()],
) -> Workspace:
    """Rename a workspace (its admins, or the server's); 404 ``workspace_not_found``; 409
    ``workspace_name_taken``."""
    if workspace_id != workspace and not _server_admin(request, workspace):
        raise NotFoundError("workspace_not_found", f"no workspace {workspace_id}")
    return Workspace(**await engine.workspaces.rename(workspace_id, body.name))
