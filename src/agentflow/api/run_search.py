"""``GET /api/runs``: search a workspace's runs (seed 002's run list filters)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES, Run, RunList
from agentflow.core.records import RunRecord
from agentflow.core.run_filters import RunFilter, parse_run_filter

router = APIRouter(prefix="/api/runs", tags=["runs"], responses={**ERROR_RESPONSES})


@router.get("", response_model=RunList, summary="Search runs")
async def search_runs(request: Request, engine: EngineDep, workspace: WorkspaceDep) -> RunList:
    """The workspace's runs that match every filter given, newest first, one page at a time.

    Exact: ``status``, ``run_id``, ``workflow_id``, ``version``, ``trigger`` (event, public,
    private, schedule, manual), ``enrollment_key``, ``account_id``, ``parent_run_id``,
    ``model`` (called it at least once, as ``provider:model``), ``employee`` (runs of the
    employee of that name), ``conversation_id`` and ``channel`` (the conversation the run was
    started for); run
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
