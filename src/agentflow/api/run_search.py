"""``GET /api/runs``: search a workspace's runs (seed 002's run list filters)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES, Run, RunList
from agentflow.core.records import RunRecord
from agentflow.core.run_filters import RunFilter, parse_run_filter
from agentflow.run_list_changes import ListChange, follow_list

router = APIRouter(prefix="/api/runs", tags=["runs"], responses={**ERROR_RESPONSES})


@router.get("", response_model=RunList, summary="Search runs")
async def search_runs(request: Request, engine: EngineDep, workspace: WorkspaceDep) -> RunList:
    """The workspace's runs that match every filter given, newest first, one page at a time.

    Exact: ``status``, ``run_id``, ``workflow_id``, ``version``, ``trigger`` (event, public,
    private, schedule, manual), ``trigger_id`` (the event's ``message_id``, or the schedule's
    fire time, as rows show it), ``enrollment_key``, ``account_id``, ``parent_run_id``,
    ``model`` (called it at least once, as ``provider:model``), ``employee`` (runs of the
    employee of that name) or ``employee_id`` (seed 002: ``ai_employee_id``),
    ``conversation_id`` and ``channel`` (the conversation the run was started for); run
    variables: ``state[key]=value`` (text comparison); ranges: ``started``, ``ended``,
    ``created`` (ISO 8601 with offset), ``duration`` (ms), ``tokens``, ``usd``, each with
    ``[gte]``, ``[lte]``, ``[gt]`` or ``[lt]``. ``loop_of=<run>`` lists a run's loop items
    (left out otherwise); ``limit`` (1-500, default 50), ``before`` (the previous page's
    ``next_before``), ``exclude=state``. An unknown parameter is 422
    ``query_parameter_unknown``, a malformed one 422 ``query_parameter_invalid``.
    """
    wanted = parse_run_filter(request.query_params.multi_items())
    return page(await engine.search_runs(wanted, workspace_id=workspace), wanted)


def page(records: list[RunRecord], wanted: RunFilter) -> RunList:
    """One page of a run list, with where the next one starts."""
    rows = [Run.model_validate(r) for r in records]
    if wanted.exclude_state:
        rows = [row.model_copy(update={"state": {}}) for row in rows]
    next_before = records[-1].id if len(records) == wanted.limit else None
    return RunList(runs=rows, next_before=next_before)


_LIST_EVENTS = """Events (`event:` names; `data:` is JSON): `list` first (`runs`: the list as
`GET /api/runs` would answer it now); then `run` (`run`: a run that appeared on the list or
changed: status, reason, step, attempt, tokens, cost) and `removed` (`run_id`: it left the
list, e.g. a `status=waiting` list when the run resumed). Comments keep the connection alive.
The connection closes after ten minutes: connect again (a new `list` comes first)."""


@router.get(
    "/stream",
    summary="Follow a run list live (server-sent events)",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": _LIST_EVENTS}},
)
async def stream_run_list(request: Request, engine: EngineDep, workspace: WorkspaceDep) -> StreamingResponse:
    """The runs ``GET /api/runs`` lists with the same filters (its first page: the newest
    ``limit`` matches), then each change to them as it happens (looked at once a second).
    Errors as for the list: 422 ``query_parameter_unknown`` / ``query_parameter_invalid``."""
    wanted = parse_run_filter(request.query_params.multi_items())

    async def search(filter_: RunFilter) -> list[RunRecord]:
        return await engine.search_runs(filter_, workspace_id=workspace)

    return StreamingResponse(
        _list_lines(follow_list(search, wanted), wanted),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _list_lines(changes: AsyncIterator[ListChange | None], wanted: RunFilter) -> AsyncIterator[str]:
    yield "retry: 1000\n\n"
    async for change in changes:
        if change is None:
            yield ": still here\n\n"
            continue
        if change.kind == "list":
            data: dict[str, object] = {
                "runs": page(list(change.runs), wanted).model_dump(mode="json")["runs"]
            }
        elif change.kind == "run":
            data = {"run": page(list(change.runs), wanted).model_dump(mode="json")["runs"][0]}
        else:
            data = {"run_id": str(change.run_id)}
        yield f"event: {change.kind}\ndata: {orjson.dumps(data).decode()}\n\n"
