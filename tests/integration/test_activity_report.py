"""The activity series (issue 15: the console's charts): runs by how they stand, tasks created
and completed on time or late, and cost, per day or hour, every bucket present; cost per
workflow; filtered by workflow; bad periods refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.integration.test_tasks_api import insert_task

FLOW = {"name": "billing", "kind": "structured", "nodes": [{"id": "done", "type": "finish", "output": "x"}]}


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


async def run_at(engine: Engine, name: str, when: datetime, status: str, usd: str) -> str:
    run = await engine.start_run(name, {})
    await engine.db.pool.execute(
        "UPDATE runs SET created_at = $2::timestamptz, status = $3::text, usd_cost = $4, input_tokens = 10,"
        " due_at = CASE WHEN $3::text IN ('completed', 'failed', 'canceled') THEN NULL ELSE now() END,"
        " completed_at = CASE WHEN $3::text IN ('completed', 'failed') THEN $2::timestamptz END,"
        " canceled_at = CASE WHEN $3::text = 'canceled' THEN $2::timestamptz END WHERE id = $1",
        run.id, when, status, Decimal(usd),
    )  # fmt: skip
    return str(run.id)


async def test_each_day_counts_its_runs_tasks_and_cost(engine: Engine, api: httpx.AsyncClient) -> None:
    await engine.publish_workflow(FLOW)
    await engine.publish_workflow({**FLOW, "name": "support"})
    # Times just past (never in the future) and a day before.
    recent = datetime.now(UTC) - timedelta(seconds=5)
    earlier = recent - timedelta(days=1)
    await run_at(engine, "billing", earlier, "completed", "0.50")
    await run_at(engine, "billing", earlier + timedelta(seconds=1), "failed", "0.25")
    await run_at(engine, "support", recent, "canceled", "0.10")
    await run_at(engine, "support", recent - timedelta(seconds=1), "waiting", "0")
    await run_at(engine, "support", recent - timedelta(days=30), "completed", "9")  # before the period
    await insert_task(engine, title="made earlier", created_at=earlier)
    await insert_task(
        engine, title="done on time", created_at=earlier, status="completed",
        completed_at=recent, due_at=recent + timedelta(hours=1),
    )  # fmt: skip
    await insert_task(
        engine, title="done late", created_at=earlier, status="completed", completed_at=recent, due_at=earlier,
    )  # fmt: skip

    answer = await api.get("/api/reports/activity", params={"from": "2d"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["interval"] == "day"
    days = {b["start"][:10]: b for b in body["buckets"]}
    assert len(body["buckets"]) == 3 and list(days) == sorted(days), "every day, in order"
    before = days[(recent - timedelta(days=2)).date().isoformat()]
    assert before["runs"] == {"completed": 0, "failed": 0, "canceled": 0, "active": 0}
    first = days[earlier.date().isoformat()]
    assert first["runs"] == {"completed": 1, "failed": 1, "canceled": 0, "active": 0}
    assert Decimal(first["usd_cost"]) == Decimal("0.75") and first["tasks_created"] == 3
    last = days[recent.date().isoformat()]
    assert last["runs"] == {"completed": 0, "failed": 0, "canceled": 1, "active": 1}
    assert (last["tasks_completed_on_time"], last["tasks_completed_late"]) == (1, 1)
    assert [(c["workflow_name"], c["runs"], Decimal(c["usd_cost"])) for c in body["cost_by_workflow"]] == [
        ("billing", 2, Decimal("0.75")),
        ("support", 2, Decimal("0.10")),
    ]
    only = (await api.get("/api/reports/activity", params={"from": "2d", "workflow": "support"})).json()
    assert sum(sum(b["runs"].values()) for b in only["buckets"]) == 2
    hours = (await api.get("/api/reports/activity", params={"from": "6h", "interval": "hour"})).json()
    assert len(hours["buckets"]) in (6, 7)


async def test_bad_periods_and_unknown_workflows_are_refused(api: httpx.AsyncClient) -> None:
    too_many = await api.get("/api/reports/activity", params={"from": "30d", "interval": "hour"})
    assert too_many.status_code == 422 and too_many.json()["error"]["code"] == "report_period_invalid"
    assert "400" in too_many.json()["error"]["message"]
    backwards = await api.get("/api/reports/activity", params={"from": "1d", "to": "2d"})
    assert backwards.status_code == 422 and backwards.json()["error"]["code"] == "report_period_invalid"
    unknown = await api.get("/api/reports/activity", params={"workflow": "nope"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "workflow_not_found"
    weekly = await api.get("/api/reports/activity", params={"interval": "week"})
    assert weekly.status_code == 422
