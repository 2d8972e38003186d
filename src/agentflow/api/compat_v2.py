"""Seed 001's workflow engine V2 routes, as aliases over the engine's own (issue 14).

``POST /v2/workflows/{id}/execute`` starts a run (``trigger_data`` is its payload;
``start_from_node`` a node to start at; ``async_execution: false`` waits up to
``timeout_seconds`` for the run to end or pause), ``POST /v2/executions/{id}/resume`` answers the
run's pending request at ``node_id`` with ``user_response``, ``GET /v2/executions/{id}`` reads
it, and ``/health`` is ``/healthz``. Answers have the seed's shape: ``success``,
``execution_id``, ``execution`` (``status`` one of RUNNING, PAUSED, COMPLETED, FAILED,
CANCELLED; times in epoch milliseconds). Errors are the engine's own (``{"error": ...}``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field

from agentflow.api.deps import EngineDep, WorkspaceDep, run_ref, workflow_ref
from agentflow.api.schemas import ERROR_RESPONSES, Health, conflict
from agentflow.core.errors import ConflictError
from agentflow.core.records import RunRecord
from agentflow.engine import Engine

router = APIRouter(tags=["compatibility (seed 001)"], responses={**ERROR_RESPONSES})

STATUS = {
    "created": "RUNNING", "in_progress": "RUNNING", "waiting": "PAUSED", "suspended": "PAUSED",
    "completed": "COMPLETED", "failed": "FAILED", "canceled": "CANCELLED",
}  # fmt: skip
MAX_WAIT = 60.0
SYNC_WAIT_LIMIT = MAX_WAIT
"""The longest a synchronous execute waits, whatever ``timeout_seconds`` asks (a test lowers it)."""


class Execute(BaseModel):
    """Start a run (seed 001 ``execute``)."""

    model_config = ConfigDict(extra="forbid")
    trigger_data: Any = Field(default=None, description="The run's payload.")
    async_execution: bool = Field(default=True, description="false: wait for the run to end or pause.")
    start_from_node: str | None = Field(default=None, min_length=1, max_length=64)
    inputs: Any = Field(default=None, description="The ``{{ input }}`` of ``start_from_node``.")
    timeout_seconds: float = Field(
        default=30.0, gt=0, le=MAX_WAIT, description="How long a synchronous call waits."
    )


class Resume(BaseModel):
    """Answer the run's pending request at a node (seed 001 ``resume``)."""

    model_config = ConfigDict(extra="forbid")
    node_id: str = Field(min_length=1, max_length=64)
    user_response: dict[str, Any] = Field(
        description="``approved`` (approvals, reviews), ``response`` (a form, a choice, an edit),"
        " ``reason`` or ``comment``, ``responded_by``."
    )


class Execution(BaseModel):
    """A run in the seed's words."""

    id: UUID
    workflow_id: UUID
    status: str = Field(examples=["RUNNING"], description="RUNNING, PAUSED, COMPLETED, FAILED or CANCELLED.")
    start_time: int | None = Field(description="Epoch milliseconds.")
    end_time: int | None = None
    output: Any = None
    error: dict[str, Any] | None = None


class ExecutionAnswer(BaseModel):
    """The seed's answer: ``success``, the execution's id and the execution."""

    success: bool
    execution_id: UUID
    execution: Execution


@router.get("/health", response_model=Health, summary="Liveness (seed 001 alias of /healthz)")
async def health() -> Health:
    """200 while the process serves requests."""
    return Health(status="ok")


@router.post(
    "/v2/workflows/{workflow_id}/execute", response_model=ExecutionAnswer, summary="Execute a workflow"
)
async def execute(
    workflow_id: str, body: Annotated[Execute, Body()], engine: EngineDep, workspace: WorkspaceDep
) -> ExecutionAnswer:
    """Start a run of the workflow (by id or name) with ``trigger_data`` as its payload."""
    run = await engine.start_run(
        workflow_ref(workflow_id), body.trigger_data, start_from=body.start_from_node, inputs=body.inputs,
        workspace_id=workspace,
    )  # fmt: skip
    if not body.async_execution:
        run = await _settled(engine, run.id, workspace, min(body.timeout_seconds, SYNC_WAIT_LIMIT))
    return _answer(run)


@router.get("/v2/executions/{execution_id}", response_model=ExecutionAnswer, summary="Get an execution")
async def get_execution(execution_id: str, engine: EngineDep, workspace: WorkspaceDep) -> ExecutionAnswer:
    """A run, in the seed's shape."""
    return _answer(await engine.get_run(run_ref(execution_id), workspace_id=workspace))


@router.post(
    "/v2/executions/{execution_id}/resume",
    response_model=ExecutionAnswer,
    summary="Resume a paused execution",
    responses=conflict("`node_not_waiting`, `request_already_answered`"),
)
async def resume(
    execution_id: str, body: Resume, engine: EngineDep, workspace: WorkspaceDep
) -> ExecutionAnswer:
    """Answer the pending request of ``node_id``; the run goes on. 409 ``node_not_waiting``
    when that node asks nothing now; 422 ``response_invalid`` when the answer does not fit."""
    run = await engine.get_run(run_ref(execution_id), workspace_id=workspace)
    pending = [
        r
        for r in await engine.requests.list(status="pending", run_id=run.id, workspace_id=workspace)
        if r["node_id"] == body.node_id
    ]
    if not pending:
        raise ConflictError(
            "node_not_waiting",
            f"node {body.node_id!r} of execution {run.id} is not waiting for an answer",
            solution="Resume the node the execution is paused at (GET /api/requests?run_id=...).",
        )
    answer = body.user_response
    reason = answer.get("reason", answer.get("comment"))
    await engine.requests.respond(
        pending[0]["id"],
        approved=answer.get("approved"),
        response=answer.get("response"),
        reason=None if reason is None else str(reason),
        responded_by=answer.get("responded_by"),
        via="api",
        workspace_id=workspace,
    )
    return _answer(await engine.get_run(run.id, workspace_id=workspace))


async def _settled(engine: Engine, run_id: UUID, workspace: UUID, seconds: float) -> RunRecord:
    """The run once it has ended or paused, or as it is after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        run = await engine.get_run(run_id, workspace_id=workspace)
        if STATUS[run.status.value] != "RUNNING" or time.monotonic() >= deadline:
            return run
        await asyncio.sleep(0.05)


def _millis(value: Any) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def _answer(run: RunRecord) -> ExecutionAnswer:
    execution = Execution(
        id=run.id,
        workflow_id=run.workflow_id,
        status=STATUS[run.status.value],
        start_time=_millis(run.started_at or run.created_at),
        end_time=_millis(run.completed_at or run.canceled_at),
        output=run.output,
        error=run.error,
    )
    return ExecutionAnswer(success=run.status.value != "failed", execution_id=run.id, execution=execution)
