"""R11: workers SIGKILLed again and again while the machine is saturated (busy loops beside
them), many runs waiting: no run fails ``worker_lost`` unless its step was cut off, and a
dead worker's runs are claimed again within the lease TTL and a few poll intervals.

Two workers share the runs: a steady one, and a victim that is armed to kill itself right
after a claim (``after_claim``: every run of that claim is stranded before its step began,
the case that used to cost healthy runs a rescue each time) and that the test also kills at
random moments while it holds runs; each dead victim is replaced at once. Runs are started
faster than the workers finish them, so a ready backlog is always there for the lapsed runs
to wait behind.
Each tool step tells the recorder when it starts, under which fencing token, so a
``worker_lost`` run can be checked against the steps that were really cut off. The negative
control runs the same session with the old claim (``tests.support.naive_claim``): it must
be caught failing a run whose step was not cut off, or re-claiming late.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from agentflow.engine import Engine
from tests.fault.checks import LeaseMonitor, run_until_terminal
from tests.support.naive_claim import SABOTAGE
from tests.support.processes import Supervisor, WorkerProcess, worker_env
from tests.support.recording_server import RecordingServer

pytestmark = pytest.mark.fault

LEASE_TTL = 2.0
POLL = 0.2
RECLAIM_SLACK = 4 * POLL + 1.0
"""Allowed beyond the lease TTL for a dead worker's run to be claimed again, measured from
the death as the test noticed it to the last poll that saw the run not yet re-claimed."""
AFTER_CLAIM = 0.3
RUNS = 400
START_RATE = 40.0  # runs per second: about three times what the two loaded workers finish
CONCURRENCY = 4
SPARE_FOR = 3.0  # seconds a new victim lives before the test may kill it
DEADLINE = 150.0

FLOW = {
    "name": "r11",
    "kind": "structured",
    "nodes": [
        {"id": "one", "type": "tool", "tool": "interval", "args": {"seconds": 0.05}},
        {"id": "two", "type": "tool", "tool": "interval", "args": {"seconds": 0.01}},
        {"id": "pause", "type": "wait", "duration": "0.2s"},
        {"id": "three", "type": "tool", "tool": "interval", "args": {"seconds": 0.05}},
        {"id": "done", "type": "finish", "output": {"i": "{{ payload.i }}"}},
    ],
}


@pytest.fixture
def busy_machine() -> Iterator[None]:
    """Two busy loops, one per core, for the whole test."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


async def session(
    engine: Engine,
    recorder: RecordingServer,
    log_dir: Path,
    seed: int,
    *,
    prelude: str = "",
    control: bool = False,
) -> dict[str, Any]:
    """Run the chaos; return the verdict.

    ``control``: stop as soon as the negative control has caught the claim: a run failed
    ``worker_lost`` although its step was not cut off, or a re-claim came late while there
    are under 100 (then the p99 is the maximum, which later re-claims cannot lower).
    """
    rng = random.Random(seed)
    await engine.publish_workflow(FLOW)

    def spawn(generation: int) -> tuple[WorkerProcess, str]:
        # Generation 0 is the steady worker; every later one is a victim.
        armed = "" if generation == 0 else "after_claim"
        env = worker_env(
            engine.db.url,
            recorder.url,
            lease_ttl=LEASE_TTL,
            poll_interval=POLL,
            failpoints=f"{armed}={AFTER_CLAIM}" if armed else "",
            failpoint_seed=seed * 1000 + generation,
        )
        name = "r11-steady" if generation == 0 else f"r11-victim-g{generation}"
        return WorkerProcess(name, env, log_dir, concurrency=CONCURRENCY, prelude=prelude), armed

    monitor = LeaseMonitor(engine.db.pool)
    supervisor = Supervisor(spawn, slots=2, on_death=monitor.on_death)
    stop = asyncio.Event()
    run_ids: list[UUID] = []

    async def starter() -> None:
        for i in range(RUNS):
            run_ids.append((await engine.start_run("r11", {"i": i})).id)
            await asyncio.sleep(1 / START_RATE)

    async def killer() -> None:
        while not stop.is_set():
            await asyncio.sleep(rng.uniform(1.0, 2.5))
            # Wait for a victim that has had time to claim (and maybe die of its failpoint) and
            # holds runs: on a loaded machine a new worker takes seconds to start, and one killed
            # before its first claim would strand nothing (the session must strand runs).
            while not stop.is_set():
                now = time.monotonic()
                victims = {
                    w.name: w
                    for w in supervisor.workers
                    if w.alive() and w.ready() and w.name != "r11-steady" and now - w.started_at > SPARE_FOR
                }
                holding = await engine.db.pool.fetch(
                    "SELECT DISTINCT lease_owner FROM runs WHERE status = 'in_progress'"
                    " AND lease_owner = ANY($1::text[])",
                    list(victims),
                )
                if holding:
                    supervisor.kill(victims[holding[0]["lease_owner"]])
                    break
                await asyncio.sleep(0.1)

    async def caught() -> bool:
        rows = await engine.db.pool.fetch(
            "SELECT id, error, step_seq FROM runs WHERE id = ANY($1::uuid[]) AND error->>'code' = 'worker_lost'",
            run_ids,
        )
        since = [s for o in monitor.orphans if (s := o.surely_unclaimed_since_death) is not None]
        late_already = 0 < len(since) < 100 and max(since) > LEASE_TTL + RECLAIM_SLACK
        return late_already or any(uncut(worker_lost(row, recorder)) for row in rows)

    started = time.monotonic()
    await run_until_terminal(
        monitor, supervisor, stop, starter(), [killer()], run_ids, DEADLINE, caught if control else None
    )
    rows = await engine.db.pool.fetch(
        "SELECT id, status, error, step_seq FROM runs WHERE id = ANY($1::uuid[])", run_ids
    )
    since_death = sorted(o.since_death for o in monitor.orphans if o.since_death is not None)
    # Judged: the last moment each run was seen not re-claimed. A monitor held up by the busy
    # machine sees a re-claim late (CI once saw one 4.1 s after its lease expired, where every
    # other took 0.01-0.18 s); the run is late only if it was seen unclaimed past the bound.
    surely = sorted(s for o in monitor.orphans if (s := o.surely_unclaimed_since_death) is not None)
    deaths: dict[str, int] = {}
    for death in supervisor.deaths:
        deaths[death.cause] = deaths.get(death.cause, 0) + 1
    return {
        "seed": seed,
        "elapsed_s": round(time.monotonic() - started, 1),
        "runs": len(rows),
        "statuses": {s: sum(1 for r in rows if r["status"] == s) for s in {r["status"] for r in rows}},
        "worker_lost": [
            worker_lost(r, recorder) for r in rows if (r["error"] or {}).get("code") == "worker_lost"
        ],
        "deaths": deaths,
        "crashes": supervisor.crashes,  # workers that exited by themselves (a broken worker)
        "orphaned_runs": len(monitor.orphans),
        "never_reclaimed": sum(1 for o in monitor.orphans if o.stranded),
        "ended_by_late_commit": sum(1 for o in monitor.orphans if o.ended_unclaimed),
        "reclaim_since_death_p99_s": round(since_death[int(len(since_death) * 0.99)], 3)
        if since_death
        else None,
        "reclaim_since_death_max_s": round(since_death[-1], 3) if since_death else None,
        "unclaimed_since_death_p99_s": round(surely[int(len(surely) * 0.99)], 3) if surely else None,
        # Where a late re-claim's time went (after the lease expired, after a worker could
        # claim): CI once saw a p99 of 3.96 s that eight runs of the same seed here did not.
        "rescue": monitor.summary(),
    }


def worker_lost(row: Any, recorder: RecordingServer) -> dict[str, Any]:
    """A ``worker_lost`` run: the deaths its error counts, and the starts of its step the
    recorder saw (each under its own fencing token; a step never begun has none)."""
    starts = {
        c.body["fencing_token"]
        for c in recorder.calls("/interval/start")
        if c.body["run_id"] == str(row["id"]) and c.body["seq"] == row["step_seq"]
    }
    details = row["error"].get("details", {})
    counted = details.get("while_step_ran", 4)  # the naive claim counts every lapse
    return {"step": row["step_seq"], "counted": counted, "started": len(starts), "details": details}


def uncut(lost: dict[str, Any]) -> bool:
    """A ``worker_lost`` run failed for more deaths than cut its step off."""
    return lost["started"] < lost["counted"]


def seed_of() -> int:
    return int(os.environ.get("AGENTFLOW_FAULT_SEED") or random.SystemRandom().randrange(1, 10**6))


def late(verdict: dict[str, Any]) -> bool:
    p99 = verdict["unclaimed_since_death_p99_s"]
    return p99 is None or p99 > LEASE_TTL + RECLAIM_SLACK


async def test_r11_killed_workers_on_a_busy_machine_fail_no_healthy_run(
    engine: Engine, recorder: RecordingServer, log_dir: Path, busy_machine: None
) -> None:
    seed = seed_of()
    print(f"\nR11 seed={seed} (rerun with AGENTFLOW_FAULT_SEED={seed})")
    verdict = await session(engine, recorder, log_dir, seed)
    print("VERDICT R11:", json.dumps(verdict, default=str))
    assert sum(verdict["deaths"].values()) >= 4, "the session must kill workers"
    assert verdict["crashes"] == [] and verdict["orphaned_runs"] > 0, verdict
    # Only a run whose step was cut off by every death counted may fail (R11); with steps
    # of 10-50 ms and a death every second or two, none is expected to be.
    assert not any(uncut(lost) for lost in verdict["worker_lost"]), verdict
    assert verdict["statuses"] == {"completed": RUNS}, verdict
    assert verdict["never_reclaimed"] == 0
    assert not late(verdict), verdict


async def test_r11_negative_control_catches_the_naive_claim(
    engine: Engine, recorder: RecordingServer, log_dir: Path, busy_machine: None
) -> None:
    seed = seed_of()
    print(f"\nR11 negative control seed={seed} (rerun with AGENTFLOW_FAULT_SEED={seed})")
    verdict = await session(engine, recorder, log_dir, seed, prelude=SABOTAGE, control=True)
    print("VERDICT R11 negative control:", json.dumps(verdict, default=str))
    # The sabotaged workers really worked (a worker that cannot start strands nothing, and no
    # re-claim at all would look late).
    assert verdict["crashes"] == [] and verdict["orphaned_runs"] > 0, verdict
    assert any(uncut(lost) for lost in verdict["worker_lost"]) or late(verdict), (
        "the naive claim must be caught"
    )
