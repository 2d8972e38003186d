"""Impact reports: ``GET /api/ai/workflows/{workflow}/report`` (one agent workflow) and
``GET /api/reports/impact`` (every agent workflow, or one): what the agent did, what human work
it replaced, and what it cost, per account and per period."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal
from uuid import UUID

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from agentflow.api.deps import EngineDep, WorkspaceDep, workflow_ref
from agentflow.api.schemas import ERROR_RESPONSES
from agentflow.core.reports import ImpactReport

router = APIRouter(tags=["reports"], responses={**ERROR_RESPONSES})

_BOUND = (
    "An ISO 8601 time or date (UTC unless it says), or a duration meaning that long ago (`7d`, `12h`,"
    " `PT30M`); 422 `report_period_invalid` otherwise."
)


class Figures(BaseModel):
    """What the agent did in the period, counted."""

    runs: int = Field(description="Runs started.")
    events_analysed: int = Field(description="Trigger events plus inbox events the runs' steps consumed.")
    meetings_analysed: int = Field(description="Those whose topic starts with `meeting.`.")
    action_items: int = Field(description="Action items identified (each became a task).")
    accounts: int = Field(description="Distinct accounts of those action items.")
    tasks_created: int
    tasks_completed_on_time: int = Field(description="Completed by the due date, or without one.")
    tasks_completed_late: int
    notifications_sent: int = Field(description="Notifications of the runs sent, task reminders included.")
    plans_generated: int = Field(description="Successful `generate_plan` calls.")
    model_calls: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    total_tokens: int = Field(description="Input plus output tokens.")
    usd_cost: Decimal


class WorkflowShare(BaseModel):
    """One workflow's share, valued at its own `impact` rates."""

    workflow_id: UUID
    workflow_name: str
    figures: Figures
    minutes_saved: float
    minutes_by_action: dict[str, float]


class Report(BaseModel):
    """An impact report: "What has this agent done for me?"."""

    workspace_id: UUID
    workflow_id: UUID | None = Field(description="The workflow reported on; null: every agent workflow.")
    workflow_name: str | None
    account_id: str | None = Field(description="The account reported on; null: every account.")
    since: datetime | None = Field(description="The period's start (inclusive); null: unbounded.")
    until: datetime | None = Field(description="The period's end (exclusive); null: unbounded.")
    generated_at: datetime
    figures: Figures
    minutes_saved: float = Field(description="Estimated human minutes the work replaced.")
    minutes_by_action: dict[str, float]
    workflows: list[WorkflowShare]
    summary: str = Field(examples=["Meetings analysed 3 · Action items 7 across 2 accounts · ..."])


@router.get(
    "/api/ai/workflows/{workflow}/report", response_model=Report, summary="Impact report of an agent workflow"
)
async def workflow_report(
    workflow: str,
    engine: EngineDep,
    workspace: WorkspaceDep,
    account: Annotated[str | None, Query(max_length=200, description="Only this account.")] = None,
    since: Annotated[str | None, Query(alias="from", max_length=100, description=_BOUND)] = None,
    until: Annotated[str | None, Query(alias="to", max_length=100, description=_BOUND)] = None,
) -> Report:
    """What the workflow's runs did in the period ``[from, to)``, and the human work it replaced
    (valued with the workflow's ``impact`` config). 404 ``workflow_not_found``; 422
    ``workflow_not_agent`` for a structured workflow."""
    report = await engine.reports.impact(
        workflow=workflow_ref(workflow), account=account, since=since, until=until, workspace_id=workspace
    )
    return _report(report)


@router.get("/api/reports/impact", response_model=Report, summary="Impact report of the workspace")
async def impact_report(
    engine: EngineDep,
    workspace: WorkspaceDep,
    workflow: Annotated[
        str | None, Query(max_length=200, description="Only this agent workflow (id or name).")
    ] = None,
    account: Annotated[str | None, Query(max_length=200, description="Only this account.")] = None,
    since: Annotated[str | None, Query(alias="from", max_length=100, description=_BOUND)] = None,
    until: Annotated[str | None, Query(alias="to", max_length=100, description=_BOUND)] = None,
) -> Report:
    """What every agent workflow (or one) did in the period, each valued at its own rates."""
    report = await engine.reports.impact(
        workflow=workflow_ref(workflow) if workflow is not None else None,
        account=account,
        since=since,
        until=until,
        workspace_id=workspace,
    )
    return _report(report)


def _report(report: ImpactReport) -> Report:
    return Report.model_validate(report.to_json())


class ActivityBucket(BaseModel):
    """What happened in one bucket of time."""

    start: datetime
    runs: dict[str, int] = Field(
        description="Runs created in the bucket by how they stand now: completed, failed, canceled, active."
    )
    usd_cost: Decimal = Field(description="What those runs cost.")
    tasks_created: int
    tasks_completed_on_time: int = Field(
        description="Completed in the bucket by their due time (or without one)."
    )
    tasks_completed_late: int


class ActivityCost(BaseModel):
    """One workflow's runs and cost over the period, the costliest first."""

    workflow_id: UUID
    workflow_name: str
    runs: int
    tokens: int
    usd_cost: Decimal


class Activity(BaseModel):
    """The workspace's activity over time: what the console charts."""

    since: datetime
    until: datetime
    interval: str = Field(examples=["day"])
    buckets: list[ActivityBucket]
    cost_by_workflow: list[ActivityCost]


@router.get("/api/reports/activity", response_model=Activity, summary="Activity over time")
async def activity(
    engine: EngineDep,
    workspace: WorkspaceDep,
    workflow: Annotated[
        str | None, Query(max_length=200, description="Only this workflow (id or name).")
    ] = None,
    since: Annotated[
        str | None, Query(alias="from", max_length=100, description=_BOUND + " Default: 14d.")
    ] = None,
    until: Annotated[
        str | None, Query(alias="to", max_length=100, description=_BOUND + " Default: now.")
    ] = None,
    interval: Annotated[Literal["hour", "day"], Query(description="The buckets' length.")] = "day",
) -> Activity:
    """Runs by how they stand, tasks created and completed (on time or late), and cost, per
    bucket of ``[from, to)``, every bucket present (at most 400); and cost per workflow. Any
    workflow kind. 422 ``report_period_invalid``; 404 ``workflow_not_found``."""
    buckets, costs, start, end = await engine.reports.activity(
        since=since, until=until, interval=interval, workflow=workflow_ref(workflow) if workflow else None,
        workspace_id=workspace,
    )  # fmt: skip
    return Activity(
        since=start,
        until=end,
        interval=interval,
        buckets=[ActivityBucket.model_validate(b, from_attributes=True) for b in buckets],
        cost_by_workflow=[ActivityCost.model_validate(c, from_attributes=True) for c in costs],
    )
