"""``/api/ai/workflows``: publish, list and inspect workflows and their versions; compare two
versions and roll back to one."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

import asyncpg
from fastapi import APIRouter, Body, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from agentflow.api.audit_trail import note
from agentflow.api.deps import EngineDep, WorkspaceDep, version_ref, workflow_ref
from agentflow.api.errors import ApiError
from agentflow.api.schemas import (
    ERROR_RESPONSES,
    MAX_VERSION,
    GraphLink,
    GraphNode,
    ListedWorkflow,
    Published,
    Version,
    Workflow,
    WorkflowDetail,
    WorkflowGraph,
    WorkflowList,
    conflict,
)
from agentflow.core.config_diff import diff_configs, unified_yaml
from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ConfigError, NotFoundError
from agentflow.store import workflows
from agentflow.store.workflows import Published as PublishedRecord

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
async def list_workflows(
    engine: EngineDep,
    workspace: WorkspaceDep,
    archived: Annotated[bool, Query(description="List the archived workflows instead.")] = False,
) -> WorkflowList:
    """The workspace's workflows that are not archived (or, with ``archived=true``, those that
    are), by name, each with its newest run."""
    records = await engine.list_workflows(archived=archived, workspace_id=workspace)
    last = await workflows.last_runs(engine.db.pool, workspace, [r.id for r in records])
    return WorkflowList(
        workflows=[ListedWorkflow.model_validate({**r.__dict__, "last_run": last.get(r.id)}) for r in records]
    )


class FlagsChange(BaseModel):
    """The flags to change (at least one)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    enabled: bool | None = Field(default=None, description="Whether triggers and schedules start it.")
    draft: bool | None = Field(default=None, description="A draft is started by nothing but a person.")
    archived: bool | None = Field(
        default=None,
        description="Archive (disabled, out of the default list, started by nothing) or unarchive"
        " (it stays disabled until enabled).",
    )


_FORCE = Query(description="Do it even though other workflows use this one (they are listed in the 409).")


@router.patch(
    "/{workflow_id}",
    response_model=Workflow,
    summary="Enable, disable, archive or unarchive a workflow",
    responses=conflict("`resource_in_use` (other workflows start it; see `force`), `workflow_archived`"),
)
async def change_flags(
    workflow_id: str,
    request: Request,
    body: Annotated[FlagsChange, Body()],
    engine: EngineDep,
    workspace: WorkspaceDep,
    force: Annotated[bool, _FORCE] = False,
) -> Workflow:
    """Change a workflow's flags. Disabling, drafting or archiving a workflow that the latest
    version of another (or an active run) starts is refused with 409 ``resource_in_use`` and
    the list, unless ``force=true``; enabling an archived one needs ``archived: false`` too."""
    if not body.model_fields_set:
        raise ConfigError(
            "nothing_to_change", "the body names no flag", solution="Send enabled, draft or archived."
        )
    note(request, **body.model_dump(exclude_unset=True), **({"force": True} if force else {}))
    changed = await engine.set_flags(
        workflow_ref(workflow_id), draft=body.draft, enabled=body.enabled, archived=body.archived,
        force=force, workspace_id=workspace,
    )  # fmt: skip
    return Workflow.model_validate(changed)


@router.delete(
    "/{workflow_id}",
    status_code=204,
    summary="Delete a workflow",
    responses=conflict("`workflow_has_active_runs`, `resource_in_use` (see `force`)"),
)
async def delete_workflow(
    workflow_id: str, engine: EngineDep, workspace: WorkspaceDep, force: Annotated[bool, _FORCE] = False
) -> Response:
    """Delete a workflow with its versions, finished runs and their steps, triggers and
    schedules. Refused (409) while a run of it is active, and while other workflows start it
    unless ``force=true`` (their steps then fail ``child_workflow_not_found``)."""
    await engine.delete_workflow(workflow_ref(workflow_id), force=force, workspace_id=workspace)
    return Response(status_code=204)


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
    request: Request,
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
    _note_published(request, published)
    if published.created:
        response.headers["Location"] = (
            f"{router.prefix}/{published.workflow.id}/versions/{published.version.version}"
        )
    else:
        response.status_code = 200
    return _answer(published)


@router.get("/{workflow_id}", response_model=WorkflowDetail, summary="Get a workflow")
async def get_workflow(workflow_id: str, engine: EngineDep, workspace: WorkspaceDep) -> WorkflowDetail:
    """A workflow (by id or name) with the config of its latest version."""
    workflow = await engine.get_workflow(workflow_ref(workflow_id), workspace_id=workspace)
    latest = await engine.get_version(workflow.id, workspace_id=workspace)
    return WorkflowDetail(
        **Workflow.model_validate(workflow).model_dump(),
        config=latest.config,
        content_hash=latest.content_hash,
        graph=_graph_of(latest.config, latest.content_hash),
    )


_GRAPHS: dict[str, WorkflowGraph | None] = {}
"""Graphs drawn, by their config's content hash (a version's config never changes)."""
_GRAPHS_KEPT = 256


def _graph_of(document: dict[str, Any], content_hash: str) -> WorkflowGraph | None:
    """The graph a stored structured config runs (None for other kinds), validated and drawn
    once per content hash: the console asks for it on every visit of a workflow's page."""
    if content_hash not in _GRAPHS:
        if len(_GRAPHS) >= _GRAPHS_KEPT:
            _GRAPHS.pop(next(iter(_GRAPHS)))
        _GRAPHS[content_hash] = _draw(document)
    return _GRAPHS[content_hash]


def _draw(document: dict[str, Any]) -> WorkflowGraph | None:
    config = validate_config(document, stored=True)
    if not isinstance(config, StructuredConfig):
        return None
    graph = config.graph
    owners = {attached: node.id for node in config.nodes for attached in node.attached_ids()}
    return WorkflowGraph(
        nodes=[
            GraphNode(id=n.id, type=n.type, ports=list(n.output_ports()), attached_to=owners.get(n.id))
            for n in config.nodes
        ],
        links=[GraphLink(source=link.source, port=link.port, to=link.target) for link in graph.links],
        entry=graph.entry(),
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


class VersionSummary(BaseModel):
    """One version of a workflow, without its config."""

    version: int
    content_hash: str
    created_at: datetime
    latest: bool


class VersionList(BaseModel):
    """A workflow's versions, newest first."""

    workflow_id: UUID
    versions: list[VersionSummary]


class Change(BaseModel):
    """One difference between two configs."""

    path: str = Field(examples=["nodes[id=ask].message"])
    change: str = Field(examples=["changed"], description="added, removed or changed.")
    before: Any
    after: Any


class VersionDiff(BaseModel):
    """What changed from one version to another."""

    workflow_id: UUID
    before: int
    after: int
    changes: list[Change]
    unified: str = Field(description="The two configs as YAML, as a unified diff.")


class Rollback(BaseModel):
    """Publish an older version's config as the newest version."""

    model_config = ConfigDict(extra="forbid")
    version: int = Field(ge=1, le=MAX_VERSION, description="The version whose config to publish again.")


@router.get("/{workflow_id}/versions", response_model=VersionList, summary="List a workflow's versions")
async def list_versions(workflow_id: str, engine: EngineDep, workspace: WorkspaceDep) -> VersionList:
    """Every version, newest first."""
    workflow = await engine.get_workflow(workflow_ref(workflow_id), workspace_id=workspace)
    rows = await workflows.list_versions(engine.db.pool, workspace, workflow.id)
    return VersionList(
        workflow_id=workflow.id,
        versions=[VersionSummary(**r, latest=r["version"] == workflow.latest_version) for r in rows],
    )


@router.get(
    "/{workflow_id}/versions/{before}/diff/{after}",
    response_model=VersionDiff,
    summary="Compare two versions",
)
async def diff_versions(
    workflow_id: str, before: str, after: str, engine: EngineDep, workspace: WorkspaceDep
) -> VersionDiff:
    """Each changed field by path (nodes matched by id) and a unified YAML diff; ``latest`` may
    stand for the newest version."""
    ref = workflow_ref(workflow_id)
    old = await engine.get_version(ref, version_ref(before), workspace_id=workspace)
    new = await engine.get_version(ref, version_ref(after), workspace_id=workspace)
    labels = (f"v{old.version}", f"v{new.version}")
    return VersionDiff(
        workflow_id=old.workflow_id,
        before=old.version,
        after=new.version,
        changes=[Change(**c) for c in diff_configs(old.config, new.config)],
        unified=unified_yaml(old.config, new.config, labels),
    )


@router.post(
    "/{workflow_id}/rollback",
    response_model=Published,
    status_code=201,
    summary="Roll back to a version",
    responses={200: {"model": Published, "description": "Unchanged: the latest version has this config"}},
)
async def rollback(
    workflow_id: str,
    body: Rollback,
    request: Request,
    response: Response,
    engine: EngineDep,
    workspace: WorkspaceDep,
) -> Published:
    """Publish version ``version``'s config again, as the newest version (runs already started
    keep theirs); checked as any publish is. 200 when the latest already has that config."""
    old = await engine.get_version(workflow_ref(workflow_id), body.version, workspace_id=workspace)
    published = await engine.publish_workflow(old.config, workspace_id=workspace)
    _note_published(request, published)
    if not published.created:
        response.status_code = 200
    return _answer(published)


def _note_published(request: Request, published: PublishedRecord) -> None:
    """Name the workflow and version in the request's audit entry."""
    note(
        request,
        workflow_id=published.workflow.id,
        workflow=published.workflow.name,
        version=published.version.version,
    )


def _answer(published: PublishedRecord) -> Published:
    """What a publish (or a rollback) answers."""
    return Published(
        workflow=Workflow.model_validate(published.workflow),
        version=published.version.version,
        content_hash=published.version.content_hash,
        created=published.created,
    )
