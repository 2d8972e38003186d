"""``/api/ai/workflows``: publish, list and inspect workflows and their versions."""

from __future__ import annotations

from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Body, Query, Response

from agentflow.api.deps import EngineDep, WorkspaceDep, version_ref, workflow_ref
from agentflow.api.errors import ApiError
from agentflow.api.schemas import (
    ERROR_RESPONSES,
    Published,
    Version,
    Workflow,
    WorkflowDetail,
    WorkflowList,
    conflict,
)
from agentflow.core.errors import NotFoundError

router = APIRouter(prefix="/api/ai/workflows", tags=["workflows"], responses={**ERROR_RESPONSES})

_CONFIG_EXAMPLE = {
    "name": "greet",
    "kind": "structured",
    "nodes": [
        {"id": "hello", "type": "tool", "tool": "echo", "args": {"value": "{{ payload.name }}"}},
        {"id": "done", "type": "finish", "output": {"said": "{{ steps.hello.value }}"}},
    ],
}


@router.get("", response_model=WorkflowList, summary="List workflows")
async def list_workflows(engine: EngineDep, workspace: WorkspaceDep) -> WorkflowList:
    """Every workflow of the workspace, by name."""
    records = await engine.list_workflows(workspace_id=workspace)
    return WorkflowList(workflows=[Workflow.model_validate(r) for r in records])


@router.post(
    "",
    response_model=Published,
    status_code=201,
    summary="Publish a workflow config",
    response_description="Created: the config is stored as a new version",
    responses={
        200: {"model": Published, "description": "Unchanged: the latest version has this content"},
        **conflict("`workflow_kind_mismatch` (a workflow keeps its kind)"),
    },
)
async def publish_workflow(
    response: Response,
    engine: EngineDep,
    workspace: WorkspaceDep,
    config: Annotated[
        dict[str, Any],
        Body(
            description="A workflow config (as in YAML files); top-level `draft` and `enabled`"
            " booleans set the workflow's flags instead of being part of the config.",
            examples=[_CONFIG_EXAMPLE],
        ),
    ],
    draft: Annotated[bool | None, Query(description="Set the draft flag.")] = None,
    enabled: Annotated[bool | None, Query(description="Set the enabled flag.")] = None,
) -> Published:
    """Validate and publish a config: 201 with a new version, or 200 when it is unchanged.

    A config is published under its ``name``: a new name creates the workflow.
    """
    config = dict(config)
    draft = _flag(config, "draft", draft)
    enabled = _flag(config, "enabled", enabled)
    try:
        published = await engine.publish_workflow(
            config, draft=draft, enabled=enabled, workspace_id=workspace
        )
    except asyncpg.ForeignKeyViolationError:
        raise NotFoundError(
            "workspace_not_found", f"workspace {workspace} does not exist", solution="Check the workspace id."
        ) from None
    if published.created:
        response.headers["Location"] = (
            f"{router.prefix}/{published.workflow.id}/versions/{published.version.version}"
        )
    else:
        response.status_code = 200
    return Published(
        workflow=Workflow.model_validate(published.workflow),
        version=published.version.version,
        content_hash=published.version.content_hash,
        created=published.created,
    )


@router.get("/{workflow_id}", response_model=WorkflowDetail, summary="Get a workflow")
async def get_workflow(workflow_id: str, engine: EngineDep, workspace: WorkspaceDep) -> WorkflowDetail:
    """A workflow (by id or name) with the config of its latest version."""
    workflow = await engine.get_workflow(workflow_ref(workflow_id), workspace_id=workspace)
    latest = await engine.get_version(workflow.id, workspace_id=workspace)
    return WorkflowDetail(
        **Workflow.model_validate(workflow).model_dump(),
        config=latest.config,
        content_hash=latest.content_hash,
    )


@router.get("/{workflow_id}/versions/{version}", response_model=Version, summary="Get a version")
async def get_version(workflow_id: str, version: str, engine: EngineDep, workspace: WorkspaceDep) -> Version:
    """The config snapshot of one version (a number, or ``latest``)."""
    record = await engine.get_version(workflow_ref(workflow_id), version_ref(version), workspace_id=workspace)
    return Version.model_validate(record)


def _flag(config: dict[str, Any], name: str, query_value: bool | None) -> bool | None:
    """Take flag ``name`` out of the body; it must agree with the query parameter if both are given."""
    if name not in config:
        return query_value
    value = config.pop(name)
    if not isinstance(value, bool):
        problem = "must be true or false"
    elif query_value is not None and query_value != value:
        problem = f"disagrees with the {name} query parameter"
    else:
        return value
    raise ApiError(
        422,
        "invalid_request",
        f"invalid request at body.{name}: {problem}",
        details={"errors": [{"path": f"body.{name}", "message": problem}]},
    )
