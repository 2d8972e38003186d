"""Retention of finished runs (issue 16): each workspace keeps its finished runs for its own
number of days (or the server's default); older ones go with their steps, inbox, requests and
streamed text, in batches, never a run that is still active or whose parent is."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.bench.tools import NOOP
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.engine import Engine
from agentflow.runtime import pure_steps
from agentflow.runtime.scheduler import Scheduler
from agentflow.runtime.worker import Worker
from agentflow.store import run_retention
from tests.conftest import make_settings
from tests.support.agents import running_worker, until
from tests.support.cli import cli_env, run_cli


def flow(name: str, *nodes: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "nodes": list(nodes)}


QUICK = flow("quick", {"id": "a", "type": "mapping", "output": {"x": 1}}, {"id": "end", "type": "finish"})
NAP = flow("nap", {"id": "nap", "type": "wait", "duration": "1h"})
CHILD = flow("child", {"id": "end", "type": "finish", "output": {"ok": True}})
PARENT = flow(
    "parent",
    {"id": "call", "type": "run_workflow", "workflow": "child"},
    {"id": "nap", "type": "wait", "duration": "1h"},
)


async def age(engine: Engine, run_ids: list[UUID], days: int) -> None:
    """Make runs look as if they started, and (when they have) ended, ``days`` days ago."""
    await engine.db.pool.execute(
        "UPDATE runs SET created_at = now() - make_interval(days => $2),"
        " completed_at = completed_at - make_interval(days => $2),"
        " canceled_at = canceled_at - make_interval(days => $2) WHERE id = ANY($1::uuid[])",
        run_ids,
        days,
    )


def napping_for_long(due_at: datetime | None) -> bool:
    return due_at is not None and due_at > datetime.now(UTC) + timedelta(minutes=30)


async def count(engine: Engine, table: str, run_ids: list[UUID]) -> int:
    column = "id" if table == "runs" else "run_id"
    found = await engine.db.pool.fetchval(
        f"SELECT count(*) FROM {table} WHERE {column} = ANY($1::uuid[])", run_ids
    )
    return int(found)


async def finished(engine: Engine, name: str, n: int, workspace_id: UUID = DEFAULT_WORKSPACE) -> list[UUID]:
    ids = []
    for _ in range(n):
        run = await engine.start_run(name, {}, workspace_id=workspace_id)
        done = await engine.wait_for_run(run.id, workspace_id=workspace_id, timeout=30)
        assert done.status == "completed", done.error
        ids.append(run.id)
    return ids


async def test_old_finished_runs_go_with_their_records_and_everything_else_stays(
    engine: Engine, worker: Worker
) -> None:
    for config in (QUICK, NAP, CHILD, PARENT):
        await engine.publish_workflow(config)
    old = await finished(engine, "quick", 3)
    recent = await finished(engine, "quick", 1)
    napping = await engine.start_run("nap", {})
    parent = await engine.start_run("parent", {})
    # Past its child (done) and napping: its timer is an hour away (while it waits for the child
    # it has none, and once woken a worker holds it, so a cancel would not be at once).
    await until(engine, parent.id, lambda r: r.status == "waiting" and napping_for_long(r.due_at))
    await until(engine, napping.id, lambda r: r.status == "waiting")
    [child] = [r.id for r in await engine.list_runs(workflow="child")]
    await engine.db.pool.execute(
        "INSERT INTO run_deltas (workspace_id, run_id, step_seq, attempt, kind, data) VALUES ($1, $2, 0, 1, 'text', 'hi')",
        DEFAULT_WORKSPACE,
        old[0],
    )
    await age(engine, [*old, napping.id, parent.id, child], 40)
    assert await count(engine, "run_steps", old) > 0

    assert (await engine.workspaces.prune_runs(0)).total == 0  # the default keeps everything
    await engine.workspaces.set_run_retention(DEFAULT_WORKSPACE, 30)
    pruned = await engine.workspaces.prune_runs(0)

    assert pruned.runs == {DEFAULT_WORKSPACE: 3}
    for table in ("runs", "run_steps", "run_deltas"):
        assert await count(engine, table, old) == 0, table
    kept = [*recent, napping.id, parent.id, child]  # recent, active, and a child of an active run
    assert await count(engine, "runs", kept) == 4
    assert await count(engine, "run_steps", recent) > 0
    # Once its parent has ended (and is old), the child goes too.
    assert (await engine.cancel_run(parent.id)).status == "canceled"
    await age(engine, [parent.id], 40)
    assert (await engine.workspaces.prune_runs(0)).total == 2
    assert await count(engine, "runs", [parent.id, child]) == 0


async def test_a_workspace_without_a_retention_of_its_own_follows_the_servers_and_zero_keeps(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(QUICK)
    other, _ = await engine.workspaces.create("other team")
    await engine.publish_workflow(QUICK, workspace_id=other["id"])
    mine = await finished(engine, "quick", 2)
    theirs = await finished(engine, "quick", 2, other["id"])
    await age(engine, [*mine, *theirs], 10)
    await engine.workspaces.set_run_retention(other["id"], 0)  # forever, whatever the default
    scheduler = Scheduler(engine.db, run_retention_days=7)
    assert await scheduler.prune_runs() == 2
    assert await count(engine, "runs", mine) == 0 and await count(engine, "runs", theirs) == 2
    await engine.workspaces.set_run_retention(other["id"], None)  # back to the default
    assert await scheduler.prune_runs() == 2
    assert await count(engine, "runs", theirs) == 0


async def test_a_pass_deletes_in_batches_until_nothing_old_is_left(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(QUICK)
    old = await finished(engine, "quick", 5)
    await age(engine, old, 3)
    pruned = await run_retention.prune_runs(engine.db.pool, 1, batch=2)
    assert pruned.total == 5 and await count(engine, "runs", old) == 0


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


async def test_the_api_sets_shows_and_resets_a_workspaces_retention(
    engine: Engine, api: httpx.AsyncClient
) -> None:
    url = f"/api/workspaces/{DEFAULT_WORKSPACE}"
    kept = await api.patch(url, json={"run_retention_days": 30})
    assert kept.status_code == 200, kept.text
    assert kept.json()["run_retention_days"] == 30
    listed = (await api.get("/api/workspaces")).json()["workspaces"]
    assert [w["run_retention_days"] for w in listed if w["id"] == str(DEFAULT_WORKSPACE)] == [30]
    both = await api.patch(url, json={"name": "main", "run_retention_days": 0})
    assert (both.json()["name"], both.json()["run_retention_days"]) == ("main", 0)
    reset = await api.patch(url, json={"run_retention_days": None})
    assert reset.status_code == 200 and reset.json()["run_retention_days"] is None
    for bad in ({"run_retention_days": -1}, {"run_retention_days": 40000}, {"run_retention_days": "soon"}):
        refused = await api.patch(url, json=bad)
        assert refused.status_code == 422, bad
    empty = await api.patch(url, json={})
    assert empty.status_code == 422 and empty.json()["error"]["code"] == "nothing_to_change"
    assert (await engine.workspaces.get(DEFAULT_WORKSPACE))["run_retention_days"] is None  # nothing half-done


def test_the_cli_sets_retention_and_prunes(database_url: str) -> None:
    env = cli_env(database_url)
    workspace = str(DEFAULT_WORKSPACE)
    kept = run_cli(["workspaces", "retention", workspace, "30"], env)
    assert kept.returncode == 0 and "30 day(s)" in kept.stdout, kept.stdout + kept.stderr
    assert "30 days" in run_cli(["workspaces", "list"], env).stdout
    back = run_cli(["workspaces", "retention", workspace, "default"], env)
    assert back.returncode == 0 and "default" in back.stdout
    bad = run_cli(["workspaces", "retention", workspace, "a while"], env)
    assert bad.returncode == 2 and "retention_invalid" in bad.stdout
    pruned = run_cli(["workspaces", "prune-runs"], env)
    assert pruned.returncode == 0 and "deleted 0 finished run(s)" in pruned.stdout


async def updates_of_runs(engine: Engine) -> tuple[int, int]:
    """(updates, HOT updates) of ``runs`` as the statistics have them."""
    row = await engine.db.pool.fetchrow(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'runs'"
    )
    return int(row["n_tup_upd"]), int(row["n_tup_hot_upd"])


async def long_run(engine: Engine, database_url: str, name: str) -> tuple[int, int]:
    """(updates, HOT updates) a 100-step run's checkpoints made, counted exactly: its worker has
    its own connections, and a backend reports its counts when its connection closes."""
    # Tool steps: each checkpoints alone (a pure node's step would ride in the next one's).
    nodes = [{"id": f"n{i}", "type": "tool", "tool": NOOP} for i in range(100)]
    await engine.publish_workflow(flow(name, *nodes, {"id": "end", "type": "finish"}))
    before = await updates_of_runs(engine)
    own = await Engine.connect(make_settings(database_url), migrate_schema=False)
    try:
        async with running_worker(own):
            run = await engine.start_run(name, {})
            assert (await engine.wait_for_run(run.id, timeout=60)).status == "completed"
    finally:
        await own.close()
    for _ in range(100):  # the closed backends' reports arrive as they exit
        after = await updates_of_runs(engine)
        if after[0] - before[0] >= 50:
            await asyncio.sleep(0.5)
            after = await updates_of_runs(engine)
            return after[0] - before[0], after[1] - before[1]
        await asyncio.sleep(0.1)
    raise AssertionError("the statistics never counted the run's checkpoints")


async def test_checkpoints_of_an_unfinished_run_stay_hot_updates(
    engine: Engine, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retention index names no column a checkpoint changes, so checkpoints touch no
    index (runs' fillfactor leaves room for that); an index on updated_at would break it."""
    # Every step a full checkpoint (none written ahead of the run's row), so each updates it.
    monkeypatch.setattr(pure_steps, "MAX_AHEAD", 0)
    updates, hot = await long_run(engine, database_url, "long")
    assert hot >= 0.9 * updates, (updates, hot)
    # Negative control: with an index on a column every checkpoint changes, none is HOT.
    await engine.db.pool.execute("CREATE INDEX runs_by_change ON runs (updated_at)")
    updates, hot = await long_run(engine, database_url, "longer")
    assert hot <= 0.5 * updates, (updates, hot)
