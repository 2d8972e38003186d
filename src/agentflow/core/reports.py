"""The impact report (seed 000: "What has this agent done for me?"): its figures, the human
minutes they replace, the period it covers, and its one-line summary. Pure; the counting is
``store.reports``.

Every figure counts what happened *in the period* (``since`` inclusive, ``until`` exclusive),
each by its own time: a run and its trigger events by when the run started, an inbox event by
when a step consumed it, a task by when it was created (and, for completions, when it was
completed), a notification by when it was sent, a plan or a model call by when its step
finished. Tokens and cost are those of the runs started in the period.
"""

from __future__ import annotations

import re
from dataclasses import asdict, field, fields, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from agentflow.core.agent_config import DEFAULT_MINUTES, Impact
from agentflow.core.durations import parse_duration
from agentflow.core.errors import ConfigError
from agentflow.core.frozen import frozen

IMPACT_ACTIONS = tuple(DEFAULT_MINUTES)
"""The actions the report values: event_analysed, action_item, task_created,
notification_sent, plan_generated."""
_BARE_NUMBER = re.compile(r"^\s*[0-9.]+\s*$")


@frozen
class ImpactFigures:
    """What the agent did, counted.

    Attributes:
        runs: runs started.
        events_analysed: events the runs read: their trigger events and the inbox events
            their steps consumed.
        meetings_analysed: those whose topic starts with ``meeting.``.
        action_items: action items identified (each becomes a task the runs created).
        accounts: distinct accounts of those action items.
        tasks_created: tasks the runs created.
        tasks_completed_on_time: those completed by their due date (or without one).
        tasks_completed_late: those completed after it.
        notifications_sent: notifications of the runs (task reminders included) sent.
        plans_generated: successful ``generate_plan`` calls.
        model_calls: the agent's decisions (one model call each).
        input_tokens / output_tokens / cached_input_tokens / usd_cost: what the runs' model
            calls used (cached tokens are part of the input tokens).
    """

    runs: int = 0
    events_analysed: int = 0
    meetings_analysed: int = 0
    action_items: int = 0
    accounts: int = 0
    tasks_created: int = 0
    tasks_completed_on_time: int = 0
    tasks_completed_late: int = 0
    notifications_sent: int = 0
    plans_generated: int = 0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    usd_cost: Decimal = Decimal(0)

    def plus(self, other: ImpactFigures) -> ImpactFigures:
        """Both counted together (``accounts`` adds up too: replace it with a distinct count)."""
        return ImpactFigures(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def actions(self) -> dict[str, int]:
        """How many of each valued action (``IMPACT_ACTIONS``)."""
        return {
            "event_analysed": self.events_analysed,
            "action_item": self.action_items,
            "task_created": self.tasks_created,
            "notification_sent": self.notifications_sent,
            "plan_generated": self.plans_generated,
        }


def minutes_by_action(figures: ImpactFigures, impact: Impact) -> dict[str, float]:
    """Human minutes the figures replace, by action, valued with the workflow's ``impact``."""
    return {action: count * impact.minutes_for(action) for action, count in figures.actions().items()}


@frozen
class WorkflowImpact:
    """One workflow's share of a report.

    Attributes:
        minutes: human minutes replaced, by action, at this workflow's rates.
    """

    workflow_id: UUID
    workflow_name: str
    figures: ImpactFigures
    minutes: dict[str, float]

    @property
    def minutes_saved(self) -> float:
        """Human minutes replaced, every action."""
        return sum(self.minutes.values())


@frozen
class ImpactReport:
    """What the agent(s) did for a workspace (or one workflow, or one account) in a period.

    Attributes:
        workflow_id / workflow_name: the workflow reported on (None: every agent workflow).
        account_id: the account reported on (None: every account).
        since / until: the period (None: unbounded on that side).
        figures: the totals (``accounts`` counted distinct across workflows).
        minutes: human minutes replaced, by action, each workflow at its own rates.
        workflows: each workflow's share, by name.
    """

    workspace_id: UUID
    workflow_id: UUID | None
    workflow_name: str | None
    account_id: str | None
    since: datetime | None
    until: datetime | None
    generated_at: datetime
    figures: ImpactFigures
    minutes: dict[str, float] = field(default_factory=dict)
    workflows: tuple[WorkflowImpact, ...] = ()

    @property
    def minutes_saved(self) -> float:
        """Human minutes replaced, every action and workflow."""
        return sum(self.minutes.values())

    def to_json(self) -> dict[str, Any]:
        """The report as JSON (what the API answers and ``agentflow report --json`` prints)."""
        return {
            "workspace_id": str(self.workspace_id),
            "workflow_id": None if self.workflow_id is None else str(self.workflow_id),
            "workflow_name": self.workflow_name,
            "account_id": self.account_id,
            "since": _iso(self.since),
            "until": _iso(self.until),
            "generated_at": _iso(self.generated_at),
            "figures": _figures_json(self.figures),
            "minutes_saved": round(self.minutes_saved, 2),
            "minutes_by_action": {k: round(v, 2) for k, v in self.minutes.items()},
            "workflows": [
                {
                    "workflow_id": str(w.workflow_id),
                    "workflow_name": w.workflow_name,
                    "figures": _figures_json(w.figures),
                    "minutes_saved": round(w.minutes_saved, 2),
                    "minutes_by_action": {k: round(v, 2) for k, v in w.minutes.items()},
                }
                for w in self.workflows
            ],
            "summary": summary_line(self),
        }


def combine(
    shares: list[tuple[UUID, str, ImpactFigures, Impact]], distinct_accounts: int
) -> tuple[ImpactFigures, dict[str, float], tuple[WorkflowImpact, ...]]:
    """The totals, the minutes and each workflow's share, from each workflow's figures and
    ``impact`` rates (a workspace-wide report sums per workflow, each at its own rates)."""
    total = ImpactFigures()
    minutes = dict.fromkeys(IMPACT_ACTIONS, 0.0)
    parts = []
    for workflow_id, name, figures, impact in sorted(shares, key=lambda s: s[1]):
        share = WorkflowImpact(workflow_id, name, figures, minutes_by_action(figures, impact))
        total = total.plus(figures)
        for action, value in share.minutes.items():
            minutes[action] += value
        parts.append(share)
    return replace(total, accounts=distinct_accounts), minutes, tuple(parts)


def parse_bound(value: str | datetime | None, name: str, now: datetime) -> datetime | None:
    """A period bound: an ISO 8601 time or date (UTC unless it says), or a duration meaning
    "that long ago" (``7d``, ``12h``, ``PT30M``).

    Raises:
        ConfigError: ``report_period_invalid``.
    """
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    text = value.strip()
    try:
        parsed = datetime.fromisoformat(text)
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    except ValueError:
        pass
    try:
        if _BARE_NUMBER.match(text):  # "7" could mean anything: ask for a unit
            raise ValueError(text)
        return now - parse_duration(text)
    except (ValueError, OverflowError):
        raise ConfigError(
            "report_period_invalid",
            f"{name} {text[:60]!r} is neither an ISO 8601 time nor a duration such as 7d",
            details={"errors": [{"path": name, "message": "expected an ISO 8601 time or a duration"}]},
            solution="Send a time such as 2026-03-01T00:00:00Z or 2026-03-01, or a duration such as"
            " 7d, 12h or PT30M (meaning that long ago).",
        ) from None


def parse_period(
    since: str | datetime | None, until: str | datetime | None, now: datetime
) -> tuple[datetime | None, datetime | None]:
    """The period ``[since, until)`` from its two bounds (see ``parse_bound``).

    Raises:
        ConfigError: ``report_period_invalid`` (also when ``since`` is not before ``until``).
    """
    start = parse_bound(since, "from", now)
    end = parse_bound(until, "to", now)
    if start is not None and end is not None and start >= end:
        raise ConfigError(
            "report_period_invalid",
            f"the period starts ({start.isoformat()}) at or after it ends ({end.isoformat()})",
            details={"errors": [{"path": "from", "message": "must be before to"}]},
            solution="Give a start before the end.",
        )
    return start, end


def human_minutes(minutes: float) -> str:
    """``~1h 12m``, ``~45m``, ``~3d 4h``: an estimate, rounded to the minute."""
    whole = round(minutes)
    if whole < 60:
        return f"~{whole}m"
    hours, rest = divmod(whole, 60)
    if hours < 48:
        return f"~{hours}h {rest}m"
    days, hours = divmod(hours, 24)
    return f"~{days}d {hours}h"


def summary_line(report: ImpactReport) -> str:
    """The report in one line, e.g. ``Meetings analysed 3 · Action items 7 across 2 accounts ·
    Tasks created 7 · completed on time 5 · ... · ~1h 12m of human work · 12,345 tokens · $0.0123``."""
    f = report.figures
    across = "account" if f.accounts == 1 else "accounts"
    parts = [
        f"Events analysed {f.events_analysed:,}",
        f"Meetings analysed {f.meetings_analysed:,}",
        f"Action items {f.action_items:,} across {f.accounts:,} {across}",
        f"Tasks created {f.tasks_created:,}",
        f"completed on time {f.tasks_completed_on_time:,}",
        f"late {f.tasks_completed_late:,}",
        f"Notifications sent {f.notifications_sent:,}",
        f"Plans {f.plans_generated:,}",
        f"{human_minutes(report.minutes_saved)} of human work",
        f"{f.total_tokens:,} tokens",
        f"${f.usd_cost:.4f}",
    ]
    return " · ".join(parts)


def _figures_json(figures: ImpactFigures) -> dict[str, Any]:
    data = asdict(figures)
    data["usd_cost"] = str(figures.usd_cost)
    data["total_tokens"] = figures.total_tokens
    return data


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()
