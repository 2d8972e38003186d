"""``agentflow demo`` leaves the user's workspace as it found it, and nothing of it keeps running.

Before: the demo published its three workflows (enabled) and its accounts into the default
workspace, so the user's own ``meeting.*`` events started demo runs afterwards.
"""

from __future__ import annotations

import asyncio

from agentflow.engine import DEFAULT_WORKSPACE, Engine
from tests.support.agents import first_run, meeting_event
from tests.support.cli import cli_env, run_cli


async def _default_workspace_rows(engine: Engine) -> dict[str, int]:
    """Rows per table that belong to the default workspace (every table with a workspace_id)."""
    tables = await engine.db.pool.fetch(
        "SELECT table_name FROM information_schema.columns"
        " WHERE table_schema = 'public' AND column_name = 'workspace_id' ORDER BY table_name"
    )
    counts = {}
    for row in tables:
        name = row["table_name"]
        counts[name] = await engine.db.pool.fetchval(
            f'SELECT count(*) FROM "{name}" WHERE workspace_id = $1', DEFAULT_WORKSPACE
        )
    return counts


async def test_the_demo_leaves_the_users_workspace_untouched(engine: Engine, database_url: str) -> None:
    # The user's own workflow on meeting events: the control that proves events are dispatched.
    await engine.publish_workflow(
        {
            "name": "mine",
            "kind": "structured",
            "trigger": {"topics": ["meeting.*"]},
            "nodes": [{"id": "w", "type": "wait", "duration": "1h"}],
        }
    )
    before = await _default_workspace_rows(engine)

    result = await asyncio.to_thread(run_cli, ["demo"], cli_env(database_url), 180)
    assert result.returncode == 0, result.stdout + result.stderr

    assert await _default_workspace_rows(engine) == before
    # Nothing of the demo is left to run: no active run, no enabled demo workflow anywhere.
    active = await engine.db.pool.fetchval("SELECT count(*) FROM runs WHERE active")
    enabled = await engine.db.pool.fetch("SELECT name FROM workflows WHERE enabled AND name LIKE 'demo-%'")
    assert active == 0 and enabled == []

    # The user's own meeting event starts the user's workflow only (the demo's meeting
    # workflow would have started a run too, and after it a worker would have run it).
    await engine.events.publish([meeting_event("user-meeting-1")])
    worker = engine.worker(concurrency=2)
    task = asyncio.create_task(worker.run())
    try:
        runs = await first_run(engine, "mine")
        await asyncio.sleep(1.0)  # time for any other dispatch decision to land
    finally:
        worker.stop()
        await task
    assert [r.id for r in await engine.list_runs()] == [runs.id]
    assert "its own workspace" in result.stdout, "the demo should say where its data went"
