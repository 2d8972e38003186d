"""R9: failing steps, hanging steps, and a step that kills its worker every time.

Exact attempt counts and backoff bounds; hung steps stopped within timeout + 1 s; a poison
run fails with ``worker_lost`` after its rescues run out while other runs on the same
(restarted) workers complete.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentflow.core.retry import RetryPolicy
from agentflow.engine import Engine
from tests.support.processes import Supervisor, WorkerProcess, worker_env
from tests.support.recording_server import RecordingServer

pytestmark = pytest.mark.fault

POLL = 0.2
# How late a due attempt may start: the poll interval plus scheduling slack on a busy
# 2-core machine (G6: a timer fires within the poll interval after its time).
LATE_TOLERANCE = POLL + 0.4
EARLY_TOLERANCE = 0.02  # the checkpoint's now() vs its finished_at (same statement)


def flow(name: str, *nodes: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "nodes": list(nodes)}


async def start_workers(
    engine: Engine, recorder: RecordingServer, log_dir: Path, prefix: str, count: int = 2, **settings: object
) -> list[WorkerProcess]:
    env = worker_env(engine.db.url, recorder.url, measured=True, lease_ttl=2, poll_interval=POLL, **settings)
    workers = [WorkerProcess(f"{prefix}-{i}", env, log_dir, concurrency=4) for i in range(count)]
    for worker in workers:
        await asyncio.to_thread(worker.wait_ready)
    return workers


@pytest.mark.timeout(90)
async def test_r9_exact_attempts_and_backoff_bounds(
    engine: Engine, recorder: RecordingServer, log_dir: Path
) -> None:
    retry = {
        "max_attempts": 4,
        "initial_delay": "0.3s",
        "backoff_factor": 2,
        "max_delay": "1s",
        "jitter": 0.5,
    }
    policy = RetryPolicy.model_validate(retry)
    await engine.publish_workflow(
        flow(
            "failing",
            {"id": "f", "type": "tool", "tool": "fail_recorded", "retry": retry},
            {"id": "x", "type": "finish"},
        )
    )
    workers = await start_workers(engine, recorder, log_dir, "r9-backoff")
    try:
        started = [await engine.start_run("failing") for _ in range(6)]
        done = [await engine.wait_for_run(r.id, timeout=30) for r in started]
    finally:
        for worker in workers:
            worker.stop()
    gaps: list[tuple[int, float, float, float]] = []
    attempts_seen = Counter(str(c.body["run_id"]) for c in recorder.calls("/attempts"))
    for run in done:
        assert run.status == "failed" and run.status_reason == "attempts_exhausted", run
        assert run.error is not None and run.error["code"] == "step_exception"
        assert run.error["details"]["attempts"] == policy.max_attempts
        steps = await engine.list_steps(run.id)
        assert [(s.seq, s.attempt, s.status) for s in steps] == [(0, n, "failed") for n in range(1, 5)]
        assert attempts_seen[str(run.id)] == policy.max_attempts, "an attempt ran that was not recorded"
        for n, (prev, nxt) in enumerate(itertools.pairwise(steps), start=1):
            low, high = policy.bounds_after(n)
            gap = (nxt.started_at - prev.finished_at).total_seconds()
            gaps.append((n, gap, low, high))
    print(
        "\nR9 backoff gaps (failures, gap, low, high):", [(n, round(g, 3), lo, hi) for n, g, lo, hi in gaps]
    )
    early = [g for g in gaps if g[1] < g[2] - EARLY_TOLERANCE]
    late = [g for g in gaps if g[1] > g[3] + LATE_TOLERANCE]
    assert early == [], f"attempts started before their backoff elapsed: {early}"
    assert late == [], f"attempts started later than backoff + {LATE_TOLERANCE}s: {late}"
    lateness = [round(g[1] - g[3], 3) for g in gaps]
    print(f"R9 worst lateness past the upper bound: {max(lateness):.3f}s")


@pytest.mark.timeout(90)
async def test_r9_hanging_steps_are_stopped_within_timeout_plus_one_second(
    engine: Engine, recorder: RecordingServer, log_dir: Path
) -> None:
    timeout = 0.5
    once = {"max_attempts": 1}
    await engine.publish_workflow(
        flow(
            "hang_async",
            {
                "id": "h",
                "type": "tool",
                "tool": "hang_async",
                "args": {"seconds": 60},
                "timeout": f"{timeout}s",
                "retry": once,
            },
        )
    )
    await engine.publish_workflow(
        flow(
            "hang_sync",
            {
                "id": "h",
                "type": "tool",
                "tool": "hang_sync",
                "args": {"seconds": 4},
                "timeout": f"{timeout}s",
                "retry": once,
            },
        )
    )
    workers = await start_workers(engine, recorder, log_dir, "r9-hang", count=1)
    measured: list[tuple[str, float, float]] = []
    try:
        for name in ("hang_async", "hang_sync", "hang_async", "hang_sync"):
            before = len(recorder.calls("/hang"))
            run = await engine.start_run(name)
            while len(recorder.calls("/hang")) == before:
                await asyncio.sleep(0.005)
            began = recorder.calls("/hang")[-1].at
            while not (current := await engine.get_run(run.id)).status.is_terminal:
                assert time.monotonic() - began < 10, "the hung step was never stopped"
                await asyncio.sleep(0.01)
            observed = time.monotonic() - began
            assert current.status == "failed" and current.error is not None, current
            assert current.error["code"] == "step_timeout"
            (step,) = await engine.list_steps(run.id)
            measured.append((name, round(step.duration_ms / 1000, 3), round(observed, 3)))
    finally:
        for worker in workers:
            worker.stop()
    print("\nR9 hung steps (tool, step duration, seen failed after the tool started):", measured)
    for name, duration, observed in measured:
        assert timeout <= duration < timeout + 1.0, (name, duration)
        # From the tool's first request to the failed run being visible to a 10 ms poll.
        assert observed < timeout + 1.0, (name, observed)


@pytest.mark.timeout(120)
async def test_r9_poison_step_fails_its_run_after_three_rescues_others_complete(
    engine: Engine, recorder: RecordingServer, log_dir: Path
) -> None:
    max_rescues = 3
    await engine.publish_workflow(
        flow(
            "poisoned",
            {"id": "ok", "type": "tool", "tool": "echo", "args": {"value": 1}},
            {"id": "bad", "type": "tool", "tool": "poison", "args": {"delay": 0.3}},
            {"id": "never", "type": "finish"},
        )
    )
    await engine.publish_workflow(
        flow(
            "healthy",
            {"id": "a", "type": "tool", "tool": "add", "args": {"a": "{{ payload.i }}", "b": 1}},
            {"id": "b", "type": "tool", "tool": "echo", "args": {"value": "{{ steps.a }}"}},
            {"id": "done", "type": "finish", "output": "{{ steps.b.value }}"},
        )
    )
    env = worker_env(
        engine.db.url, recorder.url, measured=True, lease_ttl=1.5, poll_interval=POLL, max_rescues=max_rescues
    )

    def spawn(generation: int) -> tuple[WorkerProcess, str]:
        return WorkerProcess(f"r9-poison-g{generation}", env, log_dir, concurrency=4), ""

    supervisor = Supervisor(spawn, slots=2)
    stop = asyncio.Event()
    supervisor.start()
    watch = asyncio.create_task(supervisor.watch(stop))
    try:
        poisoned = await engine.start_run("poisoned")
        healthy = []
        for i in range(24):
            healthy.append(await engine.start_run("healthy", {"i": i}))
            await asyncio.sleep(0.3)
        final = await engine.wait_for_run(poisoned.id, timeout=60)
        others = [await engine.wait_for_run(r.id, timeout=30) for r in healthy]
    finally:
        stop.set()
        await watch
        supervisor.stop_all()

    attempts = recorder.calls("/poison")
    deaths = Counter(d.cause for d in supervisor.deaths)
    print(
        f"\nR9 poison: status={final.status} reason={final.status_reason} rescues={final.rescues}"
        f" attempts={len(attempts)} tokens={[c.body['fencing_token'] for c in attempts]} deaths={dict(deaths)}"
    )
    assert supervisor.crashes == [], supervisor.crashes[:2]
    assert final.status == "failed" and final.status_reason == "worker_lost", final
    assert final.error is not None and final.error["code"] == "worker_lost"
    # The step ran once, was rescued max_rescues times, and the lease expiry after the last
    # rescue failed the run: max_rescues + 1 attempts, each under a newer lease; the
    # ``rescues`` column counts the max_rescues + 1 lease expiries.
    assert len(attempts) == max_rescues + 1
    tokens = [c.body["fencing_token"] for c in attempts]
    assert tokens == sorted(set(tokens)), tokens
    assert all(c.body["seq"] == 1 for c in attempts)
    assert final.rescues == max_rescues + 1
    assert deaths == {"sigkill": max_rescues + 1}, deaths
    steps = await engine.list_steps(poisoned.id)
    assert [(s.seq, s.status) for s in steps] == [(0, "completed")], (
        "the poison step must leave no checkpoint"
    )
    assert [o.status for o in others] == ["completed"] * len(others), [
        (o.id, o.status_reason) for o in others
    ]
    assert [o.output for o in others] == [i + 1 for i in range(len(others))]


@pytest.mark.timeout(60)
async def test_r9_hung_sync_tools_do_not_starve_later_sync_steps(
    engine: Engine, recorder: RecordingServer, log_dir: Path
) -> None:
    once = {"max_attempts": 1}
    await engine.publish_workflow(
        flow(
            "hang_sync",
            {
                "id": "h",
                "type": "tool",
                "tool": "hang_sync",
                "args": {"seconds": 30},
                "timeout": "0.5s",
                "retry": once,
            },
        )
    )
    await engine.publish_workflow(
        flow(
            "quick_sync",
            {
                "id": "a",
                "type": "tool",
                "tool": "add",
                "args": {"a": 1, "b": 2},
                "timeout": "2s",
                "retry": once,
            },
        )
    )
    env = worker_env(engine.db.url, recorder.url, measured=True, lease_ttl=2, poll_interval=POLL)
    worker = WorkerProcess("r9-starved", env, log_dir, concurrency=2)
    try:
        await asyncio.to_thread(worker.wait_ready)
        for _ in range(2):  # as many hung tools as the worker has threads
            hung = await engine.start_run("hang_sync")
            assert (await engine.wait_for_run(hung.id, timeout=10)).error["code"] == "step_timeout"  # type: ignore[index]
        quick = await engine.start_run("quick_sync")
        done = await engine.wait_for_run(quick.id, timeout=10)
    finally:
        worker.kill()  # the hung threads would delay a graceful stop
    assert done.status == "completed", done.error
