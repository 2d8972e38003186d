"""Approvals of side-effecting agent calls, resuming suspended runs, budgets, notifications.

``/api/approvals``: list, read, approve, reject (a decision binds to the request's arguments
hash; the second decision on a request gets 409). ``POST /api/runs/{id}/resume``: go on after a
budget suspended the run, with more budget. ``/api/budget``: the workspace's daily model budget
and today's spend. ``/api/notifications``: what agents sent.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, ConfigDict, Field

from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES, Run, conflict
from agentflow.core.errors import NotFoundError
from agentflow.engine import Engine
from agentflow.store import approvals, notifications

router = APIRouter(tags=["governance"], responses={**ERROR_RESPONSES})


class Approval(BaseModel):
    """A side-effecting tool call waiting for (or decided by) a person."""

    id: UUID
    run_id: UUID
    workflow_id: UUID
    step_seq: int
    tool: str
    arguments: dict[str, Any]
    arguments_hash: str = Field(description="SHA-256 of the exact call; a decision applies only to it.")
    status: str = Field(examples=["pending"])
    reason: str | None
    decided_by: str | None
    created_at: datetime
    expires_at: datetime | None
    decided_at: datetime | None
    expired: bool


class Decision(BaseModel):
    """A person's decision."""

    model_config = ConfigDict(extra="forbid")

    arguments_hash: str | None = Field(
        default=None,
        max_length=64,
        description="The hash you looked at: refused (409) if the request differs.",
    )
    reason: str | None = Field(default=None, max_length=2000)
    decided_by: str | None = Field(default=None, max_length=200)


class Allowance(BaseModel):
    """More budget for a resumed run."""

    model_config = ConfigDict(extra="forbid")

    model_calls: int | None = Field(default=None, ge=0, le=100_000)
    tool_calls: int | None = Field(default=None, ge=0, le=1_000_000)
    tokens: int | None = Field(default=None, ge=0, le=10**12)
    usd: float | None = Field(default=None, ge=0, le=1e6)
    wall_seconds: float | None = Field(default=None, ge=0, le=10**9)


class Resume(BaseModel):
    """How to resume."""

    model_config = ConfigDict(extra="forbid")

    add: Allowance = Allowance()


class Budget(BaseModel):
    """The workspace's daily model budget (UTC days) and today's use."""

    daily_usd: float | None = Field(description="null: the server's default (AGENTFLOW_WORKSPACE_DAILY_USD).")
    daily_tokens: int | None
    day: Any
    usd_cost: float
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    model_calls: int


class BudgetChange(BaseModel):
    """New daily limits (null: the server's default; 0: no limit)."""

    model_config = ConfigDict(extra="forbid")

    daily_usd: float | None = Field(default=None, ge=0, le=approvals.MAX_DAILY_USD)
    daily_tokens: int | None = Field(default=None, ge=0, le=approvals.MAX_DAILY_TOKENS)


class Notification(BaseModel):
    """A notification an agent (or a reminder) sent."""

    id: UUID
    run_id: UUID | None
    task_id: UUID | None
    account_id: str | None
    channel: str
    recipient: str
    subject: str | None
    body: str
    kind: str
    status: str
    attempts: int
    last_error: dict[str, Any] | None
    created_at: datetime
    sent_at: datetime | None


def _approval_id(value: str) -> UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFoundError("approval_not_found", f"no approval {value[:80]!r} in this workspace") from None


@router.get("/api/approvals", response_model=list[Approval], summary="List approval requests")
async def list_approvals(
    engine: EngineDep,
    workspace: WorkspaceDep,
    status: Annotated[
        Literal["pending", "approved", "rejected", "expired", "all"],
        Query(description="pending (default), approved, rejected, expired, all"),
    ] = "pending",
    run_id: UUID | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[Approval]:
    """Approval requests, newest first."""
    found = await engine.governance.approvals(
        status=None if status == "all" else status, run_id=run_id, limit=limit, workspace_id=workspace
    )
    return [Approval.model_validate(a) for a in found]


@router.get("/api/approvals/{approval_id}", response_model=Approval, summary="Get an approval request")
async def get_approval(approval_id: str, engine: EngineDep, workspace: WorkspaceDep) -> Approval:
    """One request; 404 ``approval_not_found`` for an unknown, malformed or foreign id."""
    return Approval.model_validate(
        await engine.governance.approval(_approval_id(approval_id), workspace_id=workspace)
    )


_DECIDED = conflict("`approval_decided`, `approval_expired`, `approval_mismatch`")


@router.post(
    "/api/approvals/{approval_id}/approve",
    response_model=Approval,
    summary="Approve a call",
    responses=_DECIDED,
)
async def approve(
    approval_id: str,
    engine: EngineDep,
    workspace: WorkspaceDep,
    body: Annotated[Decision | None, Body()] = None,
) -> Approval:
    """Approve the exact call; its run wakes and makes it. 409 when already decided or expired."""
    return await _decide(engine, workspace, approval_id, body or Decision(), approve=True)


@router.post(
    "/api/approvals/{approval_id}/reject",
    response_model=Approval,
    summary="Reject a call",
    responses=_DECIDED,
)
async def reject(
    approval_id: str,
    engine: EngineDep,
    workspace: WorkspaceDep,
    body: Annotated[Decision | None, Body()] = None,
) -> Approval:
    """Reject the call; its run wakes and the model sees the rejection and the reason."""
    return await _decide(engine, workspace, approval_id, body or Decision(), approve=False)


async def _decide(
    engine: Engine, workspace: UUID, approval_id: str, body: Decision, *, approve: bool
) -> Approval:
    decided = await engine.governance.decide(
        _approval_id(approval_id), approve=approve, reason=body.reason, decided_by=body.decided_by,
        arguments_hash=body.arguments_hash, workspace_id=workspace,
    )  # fmt: skip
    return Approval.model_validate(decided)


@router.post(
    "/api/runs/{run_id}/resume",
    response_model=Run,
    summary="Resume a suspended run",
    responses=conflict("`run_not_suspended`, `budget_still_exceeded`"),
)
async def resume(
    run_id: str, engine: EngineDep, workspace: WorkspaceDep, body: Annotated[Resume | None, Body()] = None
) -> Run:
    """Resume a run a budget suspended, with more budget; 409 ``budget_still_exceeded`` when it
    would be suspended again at once."""
    try:
        ref = uuid.UUID(run_id)
    except ValueError:
        raise NotFoundError("run_not_found", f"no run {run_id[:80]!r} in this workspace") from None
    body = body or Resume()
    add = {k: float(v) for k, v in body.add.model_dump(exclude_none=True).items()}
    return Run.model_validate(await engine.governance.resume(ref, add, workspace_id=workspace))


@router.get("/api/budget", response_model=Budget, summary="The workspace's daily budget")
async def get_budget(engine: EngineDep, workspace: WorkspaceDep) -> Budget:
    """Daily limits and today's (UTC) model spend."""
    return Budget.model_validate(await engine.governance.budget(workspace_id=workspace))


@router.put("/api/budget", response_model=Budget, summary="Set the workspace's daily budget")
async def set_budget(
    engine: EngineDep, workspace: WorkspaceDep, body: Annotated[BudgetChange, Body()]
) -> Budget:
    """Agent runs are suspended once the workspace's spend today reaches a limit."""
    found = await engine.governance.set_budget(
        daily_usd=body.daily_usd, daily_tokens=body.daily_tokens, workspace_id=workspace
    )
    return Budget.model_validate(found)


@router.get("/api/notifications", response_model=list[Notification], summary="List notifications")
async def list_notifications(
    engine: EngineDep,
    workspace: WorkspaceDep,
    run_id: UUID | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[Notification]:
    """Notifications, newest first (optionally one run's), with their delivery status."""
    rows = await notifications.list_notifications(engine.db.pool, workspace, run_id, limit)
    return [Notification.model_validate(r) for r in rows]
