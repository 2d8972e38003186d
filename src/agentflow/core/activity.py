"""The activity series the console charts (issue 15): per time bucket, runs by how they stand,
tasks created and completed on time or late, and cost; and cost per workflow over the period.

Pure: the store counts, this fills every bucket of the period (zeros included) in order."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from agentflow.core.errors import ConfigError
from agentflow.core.frozen import frozen

UNITS = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
MAX_BUCKETS = 400
ENDED = ("completed", "failed", "canceled")


@dataclass
class Bucket:
    """What happened in one bucket of time."""

    start: datetime
    runs: dict[str, int] = field(
        default_factory=lambda: {"completed": 0, "failed": 0, "canceled": 0, "active": 0}
    )
    usd_cost: Decimal = Decimal(0)
    tasks_created: int = 0
    tasks_completed_on_time: int = 0
    tasks_completed_late: int = 0


@frozen
class WorkflowCost:
    """One workflow's runs and cost over the period."""

    workflow_id: UUID
    workflow_name: str
    runs: int
    tokens: int
    usd_cost: Decimal


def truncate(moment: datetime, unit: str) -> datetime:
    """The start of the bucket ``moment`` falls in (UTC)."""
    moment = moment.astimezone(UTC)
    if unit == "day":
        return moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return moment.replace(minute=0, second=0, microsecond=0)


def bucket_starts(since: datetime, until: datetime, unit: str) -> list[datetime]:
    """Every bucket start of ``[since, until)``.

    Raises:
        ConfigError: ``report_period_invalid`` for an unknown unit or more than
            ``MAX_BUCKETS`` buckets.
    """
    if unit not in UNITS:
        raise ConfigError(
            "report_period_invalid",
            f"interval {unit[:20]!r} is not one of {', '.join(UNITS)}",
            solution="Use interval=hour or interval=day.",
        )
    starts = []
    moment = truncate(since, unit)
    while moment < until:
        starts.append(moment)
        if len(starts) > MAX_BUCKETS:
            raise ConfigError(
                "report_period_invalid",
                f"the period holds more than {MAX_BUCKETS} {unit}s",
                solution="Shorten the period (from, to) or use interval=day.",
            )
        moment += UNITS[unit]
    return starts


def fill(
    starts: list[datetime],
    runs: list[dict[str, Any]],
    created: list[dict[str, Any]],
    completed: list[dict[str, Any]],
) -> list[Bucket]:
    """The buckets, in order, with the counted rows added (bucket times as UTC)."""
    buckets = {start: Bucket(start) for start in starts}

    def at(row: dict[str, Any]) -> Bucket | None:
        return buckets.get(row["bucket"].replace(tzinfo=UTC))

    for row in runs:
        if (bucket := at(row)) is not None:
            state = row["status"] if row["status"] in ENDED else "active"
            bucket.runs[state] += row["runs"]
            bucket.usd_cost += row["usd_cost"]
    for row in created:
        if (bucket := at(row)) is not None:
            bucket.tasks_created += row["tasks"]
    for row in completed:
        if (bucket := at(row)) is not None:
            bucket.tasks_completed_on_time += row["on_time"]
            bucket.tasks_completed_late += row["late"]
    return list(buckets.values())


def costs(runs: list[dict[str, Any]], names: dict[UUID, str]) -> list[WorkflowCost]:
    """Cost per workflow over the period, the costliest first."""
    totals: dict[UUID, list[Any]] = {}
    for row in runs:
        total = totals.setdefault(row["workflow_id"], [0, 0, Decimal(0)])
        total[0] += row["runs"]
        total[1] += row["tokens"]
        total[2] += row["usd_cost"]
    found = [
        WorkflowCost(workflow_id, names.get(workflow_id, str(workflow_id)), n, tokens, usd)
        for workflow_id, (n, tokens, usd) in totals.items()
    ]
    return sorted(found, key=lambda c: (-c.usd_cost, -c.runs, c.workflow_name))
