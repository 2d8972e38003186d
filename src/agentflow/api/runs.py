"""``/api/ai/workflows/{workflow_id}/runs``: start, list, inspect, cancel and retry runs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body, Header, Query, Request, Response
from fastapi.responses import StreamingResponse

from agentflow.api.deps import EngineDep, WorkspaceDep, run_ref, workflow_ref
from agentflow.api.run_search import page
from agentflow.api.schemas import (
    ERROR_RESPONSES,
    NodeSummary,
    Run,
    RunDetail,
    RunList,
    StartedRun,
    StartRun,
    Step,
    TreeUsage,
    conflict,
)
from agentflow.core.errors import ConfigError, NotFoundError
from agentflow.core.graph.summaries import node_summaries
from agentflow.core.records import RunRecord
from agentflow.core.run_filters import parse_run_filter
from agentflow.core.statuses import RunStatus
from agentflow.engine import Engine
from agentflow.store import reads

POLL_SECONDS = 0.25
"""How often a stream looks at its run."""
HEARTBEAT_SECONDS = 15.0
STREAM_SECONDS = 600.0
"""How long one stream lasts; the client reconnects for more."""

router = APIRouter(
    prefix="/api/ai/workflows/{workflow_id}/runs", tags=["runs"], responses={**ERROR_RESPONSES}
)


@router.get("", response_model=RunList, summary="List runs of a workflow")
async def list_runs(
    workflow_id: str,
    request: Request,
    engine: EngineDep,
    workspace: WorkspaceDep,
    status: Annotated[RunStatus | None, Query(description="Only runs with this status.")] = None,
    limit: Annotated[int, Query(ge=1, le=500, description="At most this many runs.")] = 50,
    before: Annotated[
        UUID | None, Query(description="Continue after this run (the previous page's `next_before`).")
    ] = None,
    loop_of: Annotated[
        UUID | None,
        Query(description="The loop items (child runs of `for_each` nodes) of this run, not top-level runs."),
    ] = None,
) -> RunList:
    """Runs of the workflow, newest first, one page at a time. Loop items are not listed
    among them (a loop of 1,000 items is one run): ask for them with ``loop_of``. Takes every
    filter of ``GET /api/runs`` but ``workflow_id``; an unknown parameter is 422."""
    wanted = parse_run_filter(request.query_params.multi_items(), with_workflow=False)
    workflow = await engine.get_workflow(workflow_ref(workflow_id), workspace_id=workspace)
    wanted = replace(wanted, exact={**wanted.exact, "workflow_id": workflow.id})
    return page(await engine.search_runs(wanted, workspace_id=workspace), wanted)


@router.post(
    "",
    response_model=StartedRun,
    status_code=201,
    summary="Start a run",
    response_description="The run, created (200 and `replayed`: made by an earlier start with the key)",
    responses={
        200: {"model": StartedRun, "description": "The run an earlier start with the idempotency key made"},
        **conflict(
            "`run_already_active` (another active run holds the enrollment key), `idempotency_key_reused`"
            " (the key started a run with another request)"
        ),
    },
)
async def start_run(
    workflow_id: str,
    response: Response,
    engine: EngineDep,
    workspace: WorkspaceDep,
    request: Annotated[
        StartRun | None, Body(examples=[{"payload": {"name": "Ada"}, "state": {"attempts": 0}}])
    ] = None,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=255,
            description="Makes retries of this start safe: at most one run per workflow and key.",
        ),
    ] = None,
) -> StartedRun:
    """Start a run of the workflow's latest version (or ``version``) with ``payload`` as input.

    422 ``payload_invalid`` when the payload does not match the workflow's ``payload_format``,
    ``state_invalid`` when ``state`` does not match its ``state_definition`` (unknown or
    mistyped variables); ``details.errors`` lists each field. With ``start_from_node`` the run
    starts at that node with ``inputs`` as its ``{{ input }}`` (422 ``node_not_found`` for a
    node the workflow does not have).

    With an idempotency key (the ``Idempotency-Key`` header or ``idempotency_key``), retrying
    the start is safe: the same request again answers 200 with the run the first one made and
    ``replayed`` true, however many arrive at once; a different request with the key is 409
    ``idempotency_key_reused``; header and field that differ are 422 ``idempotency_key_mismatch``.
    """
    request = request or StartRun()
    if idempotency_key and request.idempotency_key and idempotency_key != request.idempotency_key:
        raise ConfigError(
            "idempotency_key_mismatch",
            "the Idempotency-Key header and the idempotency_key field differ",
            solution="Send the key once, in the header or in the body.",
        )
    workflow = await engine.get_workflow(workflow_ref(workflow_id), workspace_id=workspace)
    started = await engine.start_run_once(
        workflow.id,
        request.payload,
        state=request.state,
        version=request.version,
        enrollment_key=request.enrollment_key,
        start_from=request.start_from_node,
        inputs=request.inputs,
        idempotency_key=idempotency_key or request.idempotency_key,
        conversation=request.conversation.model_dump(exclude_none=True) if request.conversation else None,
        workspace_id=workspace,
    )
    response.headers["Location"] = f"/api/ai/workflows/{workflow.id}/runs/{started.run.id}"
    if started.replayed:
        response.status_code = 200
    return StartedRun(**Run.model_validate(started.run).model_dump(), replayed=started.replayed)


@router.get("/{run_id}", response_model=RunDetail, summary="Get a run and its steps")
async def get_run(workflow_id: str, run_id: str, engine: EngineDep, workspace: WorkspaceDep) -> RunDetail:
    """A run of this workflow with its step timeline (every attempt, in order) and its model
    use with that of every run it started (``total_usage``)."""
    return await run_detail(engine, workspace, await run_of(engine, workspace, workflow_id, run_id))


async def run_detail(engine: Engine, workspace: UUID, run: RunRecord) -> RunDetail:
    """``run`` with its steps, node summaries and total usage."""
    steps = await engine.list_steps(run.id, workspace_id=workspace)
    skipped = run.state.get("skipped") if isinstance(run.state, dict) else None
    nodes = node_summaries(steps, skipped if isinstance(skipped, list) else [])
    return RunDetail(
        **Run.model_validate(run).model_dump(),
        steps=[Step.model_validate(s) for s in steps],
        nodes={node_id: NodeSummary.model_validate(summary) for node_id, summary in nodes.items()},
        total_usage=TreeUsage.model_validate(await reads.tree_usage(engine.db.pool, workspace, run.id)),
    )


@router.get(
    "/{run_id}/stream",
    summary="Follow a run (server-sent events)",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "A `run` event per change."}},
)
async def stream_run(
    workflow_id: str, run_id: str, engine: EngineDep, workspace: WorkspaceDep
) -> StreamingResponse:
    """Server-sent events: a ``run`` event with the run's detail (as ``GET .../runs/{id}``) now
    and whenever it changes (a checkpoint, a cancel, a wake), until it ends or ``STREAM_SECONDS``
    pass (then reconnect); a comment line every ``HEARTBEAT_SECONDS`` keeps proxies from closing it."""
    run = await run_of(engine, workspace, workflow_id, run_id)
    return StreamingResponse(
        _changes(engine, workspace, run),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _changes(engine: Engine, workspace: UUID, run: RunRecord) -> AsyncIterator[str]:
    seen: tuple[Any, ...] | None = None
    started = last_sent = time.monotonic()
    while True:
        now = time.monotonic()
        current = await engine.get_run(run.id, workspace_id=workspace)
        mark = (current.updated_at, current.step_seq, current.status)
        if mark != seen:
            seen, last_sent = mark, now
            detail = await run_detail(engine, workspace, current)
            yield f"event: run\ndata: {detail.model_dump_json()}\n\n"
            if current.status.is_terminal:
                return
        elif now - last_sent >= HEARTBEAT_SECONDS:
            last_sent = now
            yield ": still here\n\n"
        if now - started >= STREAM_SECONDS:
            return
        await asyncio.sleep(POLL_SECONDS)


@router.post(
    "/{run_id}/cancel", response_model=Run, summary="Cancel a run", responses=conflict("`run_already_ended`")
)
async def cancel_run(workflow_id: str, run_id: str, engine: EngineDep, workspace: WorkspaceDep) -> Run:
    """Cancel a run: at once, or at its next step boundary while a step executes.

    The run comes back ``canceled``, or still running with ``cancel_requested`` true.
    409 ``run_already_ended`` when it has ended.
    """
    run = await run_of(engine, workspace, workflow_id, run_id)
    return Run.model_validate(await engine.cancel_run(run.id, workspace_id=workspace))


@router.post(
    "/{run_id}/retry",
    response_model=Run,
    summary="Retry a failed run",
    responses=conflict("`run_not_failed`, `run_already_active`"),
)
async def retry_run(workflow_id: str, run_id: str, engine: EngineDep, workspace: WorkspaceDep) -> Run:
    """Retry a failed run from its failed step; 409 ``run_not_failed`` for any other status."""
    run = await run_of(engine, workspace, workflow_id, run_id)
    return Run.model_validate(await engine.retry_run(run.id, workspace_id=workspace))


async def run_of(engine: Engine, workspace: UUID, workflow_id: str, run_id: str) -> RunRecord:
    """The run, which must belong to the workflow (404 otherwise)."""
    workflow = await engine.get_workflow(workflow_ref(workflow_id), workspace_id=workspace)
    run = await engine.get_run(run_ref(run_id), workspace_id=workspace)
    if run.workflow_id != workflow.id:
        raise NotFoundError("run_not_found", f"no run {run.id} in workflow {workflow.name!r}")
    return run
