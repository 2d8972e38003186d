"""The pure parts of accounts, reminders and the impact report."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from uuid import UUID

import pytest

from agentflow.core.accounts import AccountUpsert, fold_events, owner_problem, parse_upsert
from agentflow.core.agent_config import Impact
from agentflow.core.errors import ConfigError
from agentflow.core.reminders import ReminderPolicy, hours_text
from agentflow.core.reports import (
    ImpactFigures,
    combine,
    human_minutes,
    minutes_by_action,
    parse_bound,
    parse_period,
)

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
FIRST, SECOND = UUID(int=1), UUID(int=2)


@pytest.mark.parametrize(
    ("owner", "ok"),
    [
        ("dana@example.com", True),
        ("Dana Scully", True),
        ("José Álvarez-O'Neil", True),
        ("Team (EMEA) & Partners", True),
        ("dana@", False),
        ("dana @example.com", False),
        ("<b>dana</b>", False),
        ("", False),
        ("x" * 321, False),
        (None, True),
    ],
)
def test_an_owner_is_an_email_address_or_a_name(owner: str | None, ok: bool) -> None:
    assert (owner_problem(owner) is None) is ok


def test_events_fold_into_one_change_per_account_in_order() -> None:
    changes = fold_events([
        ("account.updated", "b", {"name": "B", "tier": 1}),
        ("account.updated", "a", {"owner": "ann@example.com", "x": 1}),
        ("email.received", "a", {"name": "ignored"}),
        ("account.updated", "a", {"x": None, "y": 2}),
        ("account.updated", "b", {"tier": None}),
        ("account.updated", None, {"name": "no id"}),
        ("account.updated", "c", {"owner": "bad@"}),  # invalid: left out, the log refuses it first
    ])  # fmt: skip
    assert changes == [
        AccountUpsert("a", None, "ann@example.com", {"x": None, "y": 2}),
        AccountUpsert("b", "B", None, {"tier": None}),
    ]
    assert changes[0].set_attributes == {"y": 2} and changes[0].removed_attributes == ["x"]
    assert fold_events([("account.created", "d", {"account_id": "d"})]) == [AccountUpsert("d")]


def test_parse_upsert_lists_every_bad_field() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_upsert("", owner="@", attributes={"k": "\x00"}, name=3)
    assert [e["path"] for e in caught.value.info.details["errors"]] == ["id", "name", "owner", "attributes"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", NOW - timedelta(days=7)),
        ("12h", NOW - timedelta(hours=12)),
        ("PT30M", NOW - timedelta(minutes=30)),
        ("2026-03-01", datetime(2026, 3, 1, tzinfo=UTC)),
        ("2026-03-01T09:30:00", datetime(2026, 3, 1, 9, 30, tzinfo=UTC)),
        ("2026-03-01T09:30:00+02:00", datetime(2026, 3, 1, 7, 30, tzinfo=UTC)),
        (None, None),
        ("", None),
    ],
)
def test_period_bounds(text: str | None, expected: datetime | None) -> None:
    assert parse_bound(text, "from", NOW) == expected


@pytest.mark.parametrize("text", ["7", "yesterday", "-7d", "2026-02-30", "1e999d", "99999999999999d"])
def test_bad_period_bounds(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_bound(text, "from", NOW)
    assert caught.value.code == "report_period_invalid"


def test_a_period_starts_before_it_ends() -> None:
    assert parse_period("2d", "1d", NOW) == (NOW - timedelta(days=2), NOW - timedelta(days=1))
    with pytest.raises(ConfigError):
        parse_period("1d", "2d", NOW)
    with pytest.raises(ConfigError):
        parse_period(NOW, NOW, NOW)


def test_minutes_follow_each_workflows_rates() -> None:
    figures = ImpactFigures(events_analysed=3, action_items=2, tasks_created=2, notifications_sent=4,
                            plans_generated=1, accounts=2, usd_cost=Decimal("0.5"))  # fmt: skip
    assert minutes_by_action(figures, Impact()) == {
        "event_analysed": 15.0, "action_item": 4.0, "task_created": 6.0, "notification_sent": 8.0,
        "plan_generated": 15.0,
    }  # fmt: skip
    cheap = Impact(minutes={"plan_generated": 0, "event_analysed": 1})
    total, minutes, shares = combine(
        [(FIRST, "b", figures, cheap), (SECOND, "a", figures, Impact())], distinct_accounts=3
    )
    assert [s.workflow_name for s in shares] == ["a", "b"]
    assert minutes["plan_generated"] == 15.0 and minutes["event_analysed"] == 15.0 + 3.0
    assert total.tasks_created == 4 and total.accounts == 3 and total.usd_cost == Decimal("1.0")


def test_human_minutes() -> None:
    assert [human_minutes(m) for m in (0, 44.6, 72, 60 * 47 + 59, 60 * 50)] == [
        "~0m", "~45m", "~1h 12m", "~47h 59m", "~2d 2h",
    ]  # fmt: skip


def test_reminder_policy() -> None:
    policy = ReminderPolicy.from_hours(24, 1.5)
    assert policy == ReminderPolicy(timedelta(hours=24), timedelta(minutes=90))
    assert (hours_text(policy.due_soon), hours_text(policy.overdue)) == ("24", "1.5")
    with pytest.raises(ValueError, match="negative"):
        ReminderPolicy.from_hours(-1, 24)
