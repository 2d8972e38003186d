"""The impact report: every figure, the period and account filters, the minutes arithmetic,
and workspace isolation, over runs, inboxes, tasks, notifications and steps in the database."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from agentflow.core.errors import ConfigError, NotFoundError
from agentflow.core.reports import ImpactFigures, ImpactReport
from agentflow.engine import Engine
from tests.support.report_data import HOUR, Seeded, seed


@pytest.fixture
async def seeded(engine: Engine) -> Seeded:
    return await seed(engine)


def figures(report: ImpactReport) -> dict[str, Any]:
    return {k: v for k, v in report.to_json()["figures"].items() if k != "total_tokens"}


RENEWALS_LAST_WEEK = {
    "runs": 2, "events_analysed": 6, "meetings_analysed": 4, "action_items": 5, "accounts": 2,
    "tasks_created": 5, "tasks_completed_on_time": 2, "tasks_completed_late": 1, "notifications_sent": 3,
    "plans_generated": 1, "model_calls": 4, "input_tokens": 1500, "output_tokens": 300,
    "cached_input_tokens": 100, "usd_cost": "0.015000",
}  # fmt: skip


async def test_one_workflow_over_the_last_week(engine: Engine, seeded: Seeded) -> None:
    report = await engine.reports.impact(workflow="renewals", since="7d")
    assert figures(report) == RENEWALS_LAST_WEEK
    assert report.workflow_id == seeded.renewals and report.workflow_name == "renewals"
    # Minutes at the workflow's rates: events 4, action items 2 (default), tasks 3 (default),
    # notifications 1, plans 20.
    assert report.minutes == {
        "event_analysed": 24.0, "action_item": 10.0, "task_created": 15.0, "notification_sent": 3.0,
        "plan_generated": 20.0,
    }  # fmt: skip
    assert report.minutes_saved == 72.0
    assert report.since is not None and report.until is None
    assert abs((report.generated_at - report.since).total_seconds() - 7 * 86400) < 5
    summary = report.to_json()["summary"]
    for part in ("Events analysed 6", "Meetings analysed 4", "Action items 5 across 2 accounts",
                 "Tasks created 5", "completed on time 2", "late 1", "Notifications sent 3", "Plans 1",
                 "~1h 12m of human work", "1,800 tokens", "$0.0150"):  # fmt: skip
        assert part in summary, part
    by_id = await engine.reports.impact(workflow=seeded.renewals, since="7d")
    assert figures(by_id) == RENEWALS_LAST_WEEK
    assert (
        figures(await engine.reports.impact(workflow=str(seeded.renewals), since="P7D")) == RENEWALS_LAST_WEEK
    )


async def test_all_time_counts_what_the_week_leaves_out(engine: Engine, seeded: Seeded) -> None:
    report = await engine.reports.impact(workflow="renewals")
    assert figures(report) == {
        "runs": 3, "events_analysed": 7, "meetings_analysed": 4, "action_items": 6, "accounts": 2,
        "tasks_created": 6, "tasks_completed_on_time": 3, "tasks_completed_late": 1, "notifications_sent": 4,
        "plans_generated": 1, "model_calls": 5, "input_tokens": 8500, "output_tokens": 1000,
        "cached_input_tokens": 100, "usd_cost": "0.085000",
    }  # fmt: skip
    assert report.minutes_saved == 7 * 4 + 6 * 2 + 6 * 3 + 4 * 1 + 20
    assert report.since is None and report.until is None


async def test_a_closed_period_counts_each_thing_by_its_own_time(engine: Engine, seeded: Seeded) -> None:
    now = await engine.db.pool.fetchval("SELECT now()")
    report = await engine.reports.impact(workflow="renewals", since="45d", until=now - 36 * HOUR)
    # Runs a1 (2 days ago) and a3 (40 days ago); a2 (1 day ago), the inbox events a1 consumed
    # 25 hours ago, a1's steps and notifications of the last day are after the period.
    assert figures(report) == {
        "runs": 2, "events_analysed": 2, "meetings_analysed": 1, "action_items": 5, "accounts": 2,
        "tasks_created": 5, "tasks_completed_on_time": 3, "tasks_completed_late": 0, "notifications_sent": 1,
        "plans_generated": 0, "model_calls": 1, "input_tokens": 8000, "output_tokens": 900,
        "cached_input_tokens": 100, "usd_cost": "0.080000",
    }  # fmt: skip
    iso = await engine.reports.impact(workflow="renewals", since=(now - 45 * 24 * HOUR).isoformat(),
                                      until=(now - 36 * HOUR).isoformat())  # fmt: skip
    assert figures(iso) == figures(report)


async def test_one_account(engine: Engine, seeded: Seeded) -> None:
    acme = await engine.reports.impact(workflow="renewals", account="acme", since="7d")
    assert figures(acme) == {
        "runs": 1, "events_analysed": 3, "meetings_analysed": 2, "action_items": 3, "accounts": 1,
        "tasks_created": 3, "tasks_completed_on_time": 2, "tasks_completed_late": 1, "notifications_sent": 2,
        "plans_generated": 1, "model_calls": 3, "input_tokens": 1000, "output_tokens": 200,
        "cached_input_tokens": 100, "usd_cost": "0.010000",
    }  # fmt: skip
    assert acme.account_id == "acme"
    globex = await engine.reports.impact(workflow="renewals", account="globex", since="7d")
    # Run a2, plus the task run a1 created for globex.
    assert figures(globex) == {
        "runs": 1, "events_analysed": 3, "meetings_analysed": 2, "action_items": 2, "accounts": 1,
        "tasks_created": 2, "tasks_completed_on_time": 0, "tasks_completed_late": 0, "notifications_sent": 1,
        "plans_generated": 0, "model_calls": 1, "input_tokens": 500, "output_tokens": 100,
        "cached_input_tokens": 0, "usd_cost": "0.005000",
    }  # fmt: skip
    nobody = await engine.reports.impact(account="nobody")
    assert nobody.figures == ImpactFigures() and len(nobody.workflows) == 2


async def test_the_workspace_sums_agent_workflows_each_at_its_rates(engine: Engine, seeded: Seeded) -> None:
    report = await engine.reports.impact(since="7d")
    assert report.workflow_id is None and report.workflow_name is None
    assert figures(report) == {
        "runs": 3, "events_analysed": 6, "meetings_analysed": 4, "action_items": 6, "accounts": 3,
        "tasks_created": 6, "tasks_completed_on_time": 2, "tasks_completed_late": 1, "notifications_sent": 4,
        "plans_generated": 1, "model_calls": 5, "input_tokens": 1800, "output_tokens": 330,
        "cached_input_tokens": 100, "usd_cost": "0.018000",
    }  # fmt: skip
    assert [w.workflow_name for w in report.workflows] == ["followups", "renewals"]
    followups, renewals = report.workflows
    assert followups.minutes_saved == 1 * 2 + 1 * 3 + 1 * 2, "default rates: action item, task, notification"
    assert renewals.minutes_saved == 72.0
    assert report.minutes_saved == 79.0
    assert followups.figures.accounts == 1 and renewals.figures.accounts == 2, "acme, globex; initech"


async def test_workspaces_are_isolated(engine: Engine, seeded: Seeded) -> None:
    theirs = await engine.reports.impact(workflow="renewals", workspace_id=seeded.other_workspace)
    assert (theirs.figures.runs, theirs.figures.events_analysed, theirs.figures.tasks_created,
            theirs.figures.notifications_sent, theirs.figures.plans_generated, theirs.figures.input_tokens) == (
        1, 1, 1, 1, 1, 11,
    )  # fmt: skip
    whole = await engine.reports.impact(workspace_id=seeded.other_workspace)
    assert [w.workflow_name for w in whole.workflows] == ["renewals"] and whole.figures == theirs.figures
    with pytest.raises(NotFoundError) as caught:
        await engine.reports.impact(workflow=theirs.workflow_id)
    assert caught.value.code == "workflow_not_found"
    mine = await engine.reports.impact(workflow="renewals")
    assert mine.figures.runs == 3 and mine.workflow_id != theirs.workflow_id


async def test_bad_requests_are_refused(engine: Engine, seeded: Seeded) -> None:
    for kwargs, code in [
        ({"workflow": "plain"}, "workflow_not_agent"),
        ({"since": "yesterday"}, "report_period_invalid"),
        ({"since": "7"}, "report_period_invalid"),
        ({"since": "1d", "until": "2d"}, "report_period_invalid"),
        ({"since": "99999999999999d"}, "report_period_invalid"),
        ({"until": "2026-13-01"}, "report_period_invalid"),
        ({"account": "a\x00b"}, "report_query_invalid"),
        ({"account": "x" * 201}, "report_query_invalid"),
    ]:
        with pytest.raises(ConfigError) as caught:
            await engine.reports.impact(**kwargs)
        assert caught.value.code == code, kwargs
    for ref in ("nope", "bad\x00name", "x" * 500):
        with pytest.raises(NotFoundError):
            await engine.reports.impact(workflow=ref)


async def test_an_empty_workspace_reports_zeros(engine: Engine) -> None:
    report = await engine.reports.impact(since="30d")
    assert report.figures == ImpactFigures() and report.workflows == () and report.minutes_saved == 0
    assert report.figures.usd_cost == Decimal(0)
    await engine.publish_workflow({"name": "idle", "kind": "agent", "prompt": "Wait."})
    idle = await engine.reports.impact(workflow="idle")
    assert idle.figures == ImpactFigures() and [w.workflow_name for w in idle.workflows] == ["idle"]
    assert "Action items 0 across 0 accounts" in idle.to_json()["summary"]
