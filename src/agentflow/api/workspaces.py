"""``/api/workspaces``: the tenants (issue 15). A key sees its own workspace; the server's
administrators (requests without a key where the server trusts them, and admin keys of the
default workspace) see, create and rename them all. A workspace's own admins rename it and
set how long it keeps finished runs."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel, ConfigDict, Field

from agentflow.api.audit_trail import note
from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES, conflict
from agentflow.core.access_keys import NAME_PATTERN
from agentflow.core.errors import ConfigError, ForbiddenError, NotFoundError
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.workspaces import MAX_RETENTION_DAYS

router = APIRouter(prefix="/api/workspaces", tags=["keys"], responses={**ERROR_RESPONSES})


class Workspace(BaseModel):
    """A tenant."""

    id: UUID
    name: str
    created_at: datetime
    run_retention_days: int | None = Field(
        default=None,
        description="Days its finished runs are kept after they end (0: forever); null: the"
        " server's `AGENTFLOW_RUN_RETENTION_DAYS`.",
    )


class WorkspaceList(BaseModel):
    """Workspaces by name."""

    workspaces: list[Workspace]


class WorkspaceIn(BaseModel):
    """A workspace's name."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100, pattern=NAME_PATTERN, examples=["acme support"])


class WorkspaceChange(BaseModel):
    """What to change: its name, how long it keeps finished runs, or both."""

    # An empty body changes nothing: the schema says so (and the route answers 422).
    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    name: str | None = Field(
        default=None, min_length=1, max_length=100, pattern=NAME_PATTERN, examples=["acme support"]
    )
    run_retention_days: int | None = Field(
        default=None,
        ge=0,
        le=MAX_RETENTION_DAYS,
        description="Days to keep finished runs (with their steps) after they end; 0 keeps them"
        " forever, null returns to the server's default.",
        examples=[30],
    )


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
    note(request, workspace_id=created["id"], name=body.name)
    return CreatedWorkspace(**created, api_key=token)


@router.patch(
    "/{workspace_id}",
    response_model=Workspace,
    summary="Rename a workspace or set its run retention",
    responses=conflict("`workspace_name_taken`"),
)
async def change_workspace(
    workspace_id: UUID,
    request: Request,
    engine: EngineDep,
    workspace: WorkspaceDep,
    body: Annotated[WorkspaceChange, Body()],
) -> Workspace:
    """Rename a workspace, or say how long it keeps finished runs (its admins, or the
    server's); 404 ``workspace_not_found``; 409 ``workspace_name_taken``; 422
    ``nothing_to_change`` for a body that names neither."""
    if workspace_id != workspace and not _server_admin(request, workspace):
        raise NotFoundError("workspace_not_found", f"no workspace {workspace_id}")
    given = body.model_fields_set
    if not given:
        raise ConfigError(
            "nothing_to_change",
            "the body names nothing to change",
            solution="Send 'name', 'run_retention_days', or both.",
        )
    found = await engine.workspaces.get(workspace_id)
    if body.name is not None:
        found = await engine.workspaces.rename(workspace_id, body.name)
    if "run_retention_days" in given:
        found = await engine.workspaces.set_run_retention(workspace_id, body.run_retention_days)
    return Workspace(**found)
