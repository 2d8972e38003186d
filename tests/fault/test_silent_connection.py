"""A connection that goes silent under a run's checkpoint: the run still finishes (G4).

A half-open link (the database's host vanished in a failover, a middlebox dropped the flow)
sends no reset: without a bound of its own the client waits for the reply forever, and the
server's ``statement_timeout`` cannot help, since the server finished long ago. Here a worker
process talks to PostgreSQL through ``FaultProxy``, which forwards one of the worker's
statements to the server (the server commits it) and then passes nothing more on that link,
keeping it open: the first step checkpoint, or the first begin (``runs.begin``, which the
worker sends for the runs of one claim together, pipelined, as their steps start). The worker's heartbeat, on other connections, keeps extending the lease of
every run it holds, so a driver stuck on that reply would hold its run forever: never
rescued, never finished.

With the engine's reply timeout (``Settings.reply_timeout``) the stuck statement fails as the
database being unavailable, the worker gives the connection up, hands the run back (no rescue
counted) and the runs finish with exactly one checkpoint per step and one task each.

Negative control: the same worker with the reply timeout sabotaged (asyncpg's default, no
bound). Long after the bound, the stalled runs are still ``in_progress`` under their first
lease, which the heartbeat keeps renewing: the hang the fix removes.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from agentflow.engine import Engine
from tests.support.fault_proxy import FaultProxy, upstream_of
from tests.support.processes import WorkerProcess, worker_env

pytestmark = pytest.mark.fault

STATEMENT_TIMEOUT = 2.0
CLIENT_TIMEOUT = 3.0
LEASE_TTL = 3.0
RUNS = 3
STEPS = 3  # pure, task, done
SABOTAGE = "import agentflow.settings as s; s.Settings.reply_timeout = property(lambda self: None)"
# The proxy's category of each statement stalled: a step's row, or a claimed run's begin.
STALLED = {"checkpoint": (), "run_begin": (("run_begin", r"SET began_token"),)}


def flow() -> dict[str, Any]:
    """A pure step, a task written in its checkpoint, finish."""
    return {
        "name": "silent-link",
        "kind": "structured",
        "nodes": [
            {"id": "pure", "type": "tool", "tool": "add", "args": {"a": 1, "b": 1}},
            {"id": "task", "type": "tool", "tool": "checkpointed_task", "args": {"title": "once"}},
            {"id": "done", "type": "finish", "output": {"sum": "{{ steps.pure }}"}},
        ],
    }


async def stall_first(
    category: str, engine: Engine, database_url: str, log_dir: Path, *, prelude: str = "", watch_s: float
) -> tuple[list[UUID], FaultProxy, WorkerProcess, float | None, list[Any]]:
    """Start ``RUNS`` runs for a worker behind a proxy that stalls its first statement of
    ``category`` (see ``STALLED``); wait up to ``watch_s`` for them to finish. Returns the runs, the proxy, the (stopped) worker, how
    long the runs took (None: not finished) and the unfinished runs as the watch ended (before
    the worker stopped)."""
    await engine.publish_workflow(flow())
    proxy = FaultProxy(upstream_of(database_url), seed=1, categories=STALLED[category])
    with proxy:
        env = worker_env(
            proxy.url(database_url), lease_ttl=LEASE_TTL, poll_interval=0.2,
            statement_timeout=STATEMENT_TIMEOUT, client_timeout=CLIENT_TIMEOUT,
            imports="tests.support.fault_tools",
        )  # fmt: skip
        worker = WorkerProcess("silent-link", env, log_dir, concurrency=4, prelude=prelude)
        try:
            await asyncio.to_thread(worker.wait_ready)
            proxy.stall(category)
            started = time.monotonic()
            ids = [(await engine.start_run("silent-link")).id for _ in range(RUNS)]
            took: float | None = None
            while time.monotonic() - started < watch_s:
                done = await engine.db.pool.fetchval(
                    "SELECT count(*) FROM runs WHERE id = any($1::uuid[]) AND NOT active", ids
                )
                if done == RUNS:
                    took = round(time.monotonic() - started, 2)
                    break
                await asyncio.sleep(0.2)
            unfinished = await engine.db.pool.fetch(
                "SELECT id, status, fencing_token, lease_owner, rescues,"
                " extract(epoch FROM lease_expires_at - now())::float8 AS lease_in_s"
                " FROM runs WHERE id = any($1::uuid[]) AND active",
                ids,
            )
        finally:
            worker.stop()
    return ids, proxy, worker, took, unfinished


@pytest.mark.parametrize("category", list(STALLED))
async def test_a_silent_connection_under_a_runs_write_costs_a_timeout_not_the_run(
    category: str, engine: Engine, database_url: str, log_dir: Path
) -> None:
    ids, proxy, worker, took, _ = await stall_first(category, engine, database_url, log_dir, watch_s=60)

    assert proxy.stalled(category) == 1
    assert took is not None, f"runs not finished: {worker.stderr()[-3000:]}"
    runs = await engine.db.pool.fetch("SELECT status, rescues FROM runs WHERE id = any($1::uuid[])", ids)
    assert [(r["status"], r["rescues"]) for r in runs] == [("completed", 0)] * RUNS, (
        "handed back, not rescued"
    )
    steps = await engine.db.pool.fetch(
        "SELECT run_id, seq, count(*) AS n FROM run_steps WHERE run_id = any($1::uuid[]) AND status = 'completed'"
        " GROUP BY run_id, seq",
        ids,
    )
    assert sorted(r["n"] for r in steps) == [1] * (RUNS * STEPS), "one checkpoint per step"
    tasks = await engine.db.pool.fetchval("SELECT count(*) FROM tasks WHERE run_id = any($1::uuid[])", ids)
    assert tasks == RUNS
    assert "TimeoutError" in worker.stderr(), "the stalled statement failed on the client's bound"
    print(
        f"\nsilent {category}: {RUNS} runs finished {took} s after their start (reply timeout {CLIENT_TIMEOUT} s)"
    )


@pytest.mark.parametrize("category", list(STALLED))
async def test_negative_control_without_a_reply_timeout_the_run_is_held_forever(
    category: str, engine: Engine, database_url: str, log_dir: Path
) -> None:
    watch_s = 4 * LEASE_TTL + 2 * CLIENT_TIMEOUT  # well past what the fixed worker needs
    _ids, proxy, worker, took, unfinished = await stall_first(
        category, engine, database_url, log_dir, prelude=SABOTAGE, watch_s=watch_s
    )

    assert proxy.stalled(category) == 1
    assert took is None, "the sabotaged worker should have hung on the silent link"
    # Held, not lost: under the first lease (token 1), which the heartbeat still renews long
    # after it would have expired, so no other worker could ever rescue the run.
    held = [
        r for r in unfinished
        if (r["status"], r["fencing_token"], r["lease_owner"], r["rescues"]) == ("in_progress", 1, worker.name, 0)
        and r["lease_in_s"] > 0
    ]  # fmt: skip
    assert held, f"a stalled run should still sit under its first, renewed lease: {unfinished}"
