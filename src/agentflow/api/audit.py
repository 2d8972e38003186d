"""``GET /api/audit``: the workspace's audit log, newest first (see ``agentflow.core.audit`` for
what is recorded). Filter by action (``workflow`` takes every ``workflow.*``), actor, workflow
(by id or name: entries name it the way the request did) and time; page with ``before``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import AwareDatetime, BaseModel, Field

from agentflow.api.deps import EngineDep, WorkspaceDep, workflow_ref
from agentflow.api.errors import ApiError
from agentflow.api.schemas import ERROR_RESPONSES
from agentflow.core.errors import NotFoundError
from agentflow.store import audit_log

router = APIRouter(prefix="/api/audit", tags=["keys"], responses={**ERROR_RESPONSES})

_PARAMETERS = frozenset({"action", "actor", "workflow", "since", "until", "before", "limit"})


class AuditEntry(BaseModel):
    """Who asked for what, when, and how it ended."""

    id: int
    at: datetime
    actor: str = Field(
        description="`key:<key id>`, `local` (no key: a loopback request), or `link` (an answer by"
        " an emailed link or a Slack button).",
        examples=["local"],
    )
    actor_name: str | None = Field(description="The key's name when it acted, or who answered by link.")
    role: str = Field(description="The key's role, or `person` for an answer by link.", examples=["admin"])
    action: str = Field(examples=["workflow.publish"])
    method: str = Field(examples=["POST"])
    route: str = Field(examples=["/api/ai/workflows"])
    target: dict[str, Any] = Field(
        description="The ids in the path, and what the handler named (a published workflow's name"
        " and version)."
    )
    status: int | None = Field(
        description="The answer's HTTP status; null when none was recorded (in flight, or the server"
        " stopped mid-request: the change may or may not have happened)."
    )
    finished_at: datetime | None


class AuditPage(BaseModel):
    """A page of the audit log."""

    entries: list[AuditEntry]
    next_before: int | None = Field(
        description="Pass as `before` for the next (older) page; null at the end."
    )


@router.get("", response_model=AuditPage, summary="Read the audit log")
async def list_audit(
    request: Request,
    engine: EngineDep,
    workspace: WorkspaceDep,
    action: Annotated[
        str | None,
        Query(min_length=1, max_length=100, description="An action (`run.cancel`) or its family (`run`)."),
    ] = None,
    actor: Annotated[str | None, Query(min_length=1, max_length=100, examples=["local"])] = None,
    workflow: Annotated[
        str | None, Query(min_length=1, max_length=200, description="A workflow's id or name.")
    ] = None,
    since: Annotated[AwareDatetime | None, Query(description="Entries at or after this time.")] = None,
    until: Annotated[AwareDatetime | None, Query(description="Entries before this time.")] = None,
    before: Annotated[int | None, Query(ge=1, le=2**62, description="Entries older than this id.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> AuditPage:
    """The workspace's audit log, newest first. 422 ``query_parameter_unknown`` for a parameter
    this route does not take."""
    unknown = sorted(set(request.query_params) - _PARAMETERS)
    if unknown:
        raise ApiError(
            422,
            "query_parameter_unknown",
            f"GET /api/audit takes no parameter {unknown[0]!r}",
            details={"parameter": unknown[0]},
            solution=f"Use {', '.join(sorted(_PARAMETERS))}.",
        )
    names: tuple[str, ...] = ()
    if workflow is not None:
        names = (workflow,)
        try:
            found = await engine.get_workflow(workflow_ref(workflow), workspace_id=workspace)
            names = (workflow, str(found.id), found.name)
        except NotFoundError:
            pass  # a deleted workflow's entries are still found by the name or id given
    rows = await audit_log.list_entries(
        engine.db.pool,
        workspace,
        action=action,
        actor=actor,
        workflow=names,
        since=since,
        until=until,
        before=before,
        limit=limit + 1,
    )
    more = len(rows) > limit
    entries = [AuditEntry.model_validate(r) for r in rows[:limit]]
    return AuditPage(entries=entries, next_before=entries[-1].id if more else None)
