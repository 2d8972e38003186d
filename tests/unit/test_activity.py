"""The activity series' shaping (core.activity): every bucket present and in order, rows added
to their own bucket, cost per workflow costliest first, bad intervals and long periods refused."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from agentflow.core.activity import MAX_BUCKETS, bucket_starts, costs, fill, truncate
from agentflow.core.errors import ConfigError

NOON = datetime(2026, 11, 27, 12, 30, tzinfo=UTC)


def test_buckets_cover_the_period_from_its_truncated_start() -> None:
    days = bucket_starts(NOON, NOON + timedelta(days=2), "day")
    assert days == [datetime(2026, 11, d, tzinfo=UTC) for d in (27, 28, 29)]
    hours = bucket_starts(NOON, NOON + timedelta(hours=2), "hour")
    assert [h.hour for h in hours] == [12, 13, 14]
    assert truncate(NOON, "hour") == datetime(2026, 11, 27, 12, tzinfo=UTC)


def test_bad_intervals_and_too_many_buckets_are_refused() -> None:
    with pytest.raises(ConfigError, match="interval 'week'") as caught:
        bucket_starts(NOON, NOON + timedelta(days=1), "week")
    assert caught.value.code == "report_period_invalid"
    with pytest.raises(ConfigError, match=str(MAX_BUCKETS)):
        bucket_starts(NOON, NOON + timedelta(hours=MAX_BUCKETS + 1), "hour")


def test_rows_land_in_their_buckets_and_others_are_dropped() -> None:
    starts = bucket_starts(NOON, NOON + timedelta(days=1), "day")
    first = starts[0].replace(tzinfo=None)  # the store's date_trunc of UTC times
    outside = (starts[0] - timedelta(days=5)).replace(tzinfo=None)
    flow = uuid.uuid4()
    runs = [
        {
            "bucket": first,
            "status": "completed",
            "workflow_id": flow,
            "runs": 2,
            "usd_cost": Decimal("1.5"),
            "tokens": 3,
        },
        {
            "bucket": first,
            "status": "waiting",
            "workflow_id": flow,
            "runs": 1,
            "usd_cost": Decimal(0),
            "tokens": 0,
        },
        {
            "bucket": outside,
            "status": "failed",
            "workflow_id": flow,
            "runs": 9,
            "usd_cost": Decimal(9),
            "tokens": 9,
        },
    ]
    created = [{"bucket": first, "tasks": 4}, {"bucket": outside, "tasks": 7}]
    completed = [{"bucket": first, "on_time": 2, "late": 1}]
    buckets = fill(starts, runs, created, completed)
    assert [b.start for b in buckets] == starts
    assert buckets[0].runs == {"completed": 2, "failed": 0, "canceled": 0, "active": 1}
    assert buckets[0].usd_cost == Decimal("1.5") and buckets[0].tasks_created == 4
    assert (buckets[0].tasks_completed_on_time, buckets[0].tasks_completed_late) == (2, 1)
    assert buckets[1].runs == {"completed": 0, "failed": 0, "canceled": 0, "active": 0}


def test_cost_per_workflow_is_costliest_first_and_named() -> None:
    cheap, dear, gone = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    rows = [
        {"workflow_id": cheap, "runs": 5, "tokens": 1, "usd_cost": Decimal("0.1")},
        {"workflow_id": dear, "runs": 1, "tokens": 2, "usd_cost": Decimal("2")},
        {"workflow_id": dear, "runs": 1, "tokens": 2, "usd_cost": Decimal("1")},
        {"workflow_id": gone, "runs": 1, "tokens": 0, "usd_cost": Decimal(0)},
    ]
    found = costs(rows, {cheap: "cheap", dear: "dear"})
    assert [(c.workflow_name, c.runs, c.usd_cost) for c in found] == [
        ("dear", 2, Decimal(3)),
        ("cheap", 5, Decimal("0.1")),
        (str(gone), 1, Decimal(0)),
    ]
