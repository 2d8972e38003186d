"""Several worker processes on one database never run the same step twice or at once."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

from agentflow import StepContext
from agentflow.engine import DEFAULT_WORKSPACE, Engine
from tests.support.fault_tools import RECORDER_ENV, interval
from tests.support.processes import WorkerProcess, worker_env
from tests.support.recording_server import Call, RecordingServer

pytestmark = pytest.mark.fault

STEPS = 3


def overlaps(intervals: list[tuple[float, float]]) -> int:
    """How many intervals start before the previous one (by start) ended."""
    ordered = sorted(intervals)
    return sum(1 for (_, end), (start, _) in itertools.pairwise(ordered) if start < end)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("processes", [2, 4])
async def test_workers_never_execute_a_step_concurrently_or_twice(
    engine: Engine, recorder: RecordingServer, log_dir: Path, processes: int
) -> None:
    nodes = [
        {"id": f"s{i}", "type": "tool", "tool": "interval", "args": {"seconds": 0.03}} for i in range(STEPS)
    ]
    await engine.publish_workflow(
        {"name": "spans", "kind": "structured", "nodes": [*nodes, {"id": "end", "type": "finish"}]}
    )
    # A long lease (no expiry under load, so no legitimate re-execution) and a short poll
    # with every worker woken by each start: the claims race as hard as they can.
    env = worker_env(engine.db.url, recorder.url, measured=True, lease_ttl=10, poll_interval=0.05)
    workers = [WorkerProcess(f"spans-{processes}-{i}", env, log_dir, concurrency=4) for i in range(processes)]
    try:
        for worker in workers:
            await asyncio.to_thread(worker.wait_ready)
        started = await asyncio.gather(*(engine.start_run("spans") for _ in range(20 * processes)))
        done = [await engine.wait_for_run(r.id, timeout=60) for r in started]
    finally:
        for worker in workers:
            worker.stop()
    assert [r.status for r in done] == ["completed"] * len(done)

    twice, same_step, by_key = analyse(recorder.calls())
    assert set(by_key) == {f"{r.id}:{seq}" for r in started for seq in range(STEPS)}
    assert twice == {}, f"steps executed other than exactly once: {twice}"
    assert same_step == 0, "two executions of one step overlapped"
    # The steps of one run never overlap either (one holder at a time, in order).
    per_run: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
    for v in by_key.values():
        start, end = v["start"][0], v["end"][0]
        per_run[start.body["run_id"]].append((start.body["seq"], start.at, end.at))
    out_of_order = [
        run
        for run, spans in per_run.items()
        if [s for s, _, _ in sorted(spans, key=lambda x: x[1])] != list(range(STEPS))
    ]
    assert out_of_order == []
    assert sum(overlaps([(a, b) for _, a, b in spans]) for spans in per_run.values()) == 0

    rows = await engine.db.pool.fetch("SELECT run_id, seq, attempt, status, worker FROM run_steps")
    counts: dict[tuple[str, int], int] = defaultdict(int)
    for row in rows:
        counts[(str(row["run_id"]), row["seq"])] += 1
    assert all(row["status"] == "completed" and row["attempt"] == 1 for row in rows)
    assert set(counts.values()) == {1} and len(counts) == len(started) * (STEPS + 1)
    pids = {c.body["pid"] for c in recorder.calls()}
    peak = max_concurrency(recorder.calls())
    share = {w.name: sum(1 for row in rows if row["worker"] == w.name) for w in workers}
    print(f"\nconcurrency {processes} processes: steps per worker {share}; peak parallel steps {peak}")
    assert len(pids) >= 2, "only one process did any work: nothing was contended"


def analyse(calls: list[Call]) -> tuple[dict[str, tuple[int, int]], int, dict[str, dict[str, list[Call]]]]:
    """Executions per step key other than exactly one (starts, ends), and how many
    executions of one step overlapped another execution of the same step."""
    by_key: dict[str, dict[str, list[Call]]] = defaultdict(lambda: {"start": [], "end": []})
    for call in calls:
        by_key[call.body["key"]][call.path.rsplit("/", 1)[1]].append(call)
    twice = {
        k: (len(v["start"]), len(v["end"]))
        for k, v in by_key.items()
        if (len(v["start"]), len(v["end"])) != (1, 1)
    }
    same_step = sum(
        overlaps([(s.at, e.at) for s, e in zip(v["start"], v["end"], strict=False)]) for v in by_key.values()
    )
    return twice, same_step, by_key


async def test_negative_control_two_executions_of_one_step_are_detected(
    recorder: RecordingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run the real ``interval`` tool for one step from two threads at once, as two workers
    holding the same run would: the analysis must report both the repeat and the overlap."""
    monkeypatch.setenv(RECORDER_ENV, recorder.url)
    ctx = StepContext(DEFAULT_WORKSPACE, uuid.uuid4(), uuid.uuid4(), 0, 1, 7, {})
    await asyncio.gather(asyncio.to_thread(interval, ctx, 0.2), asyncio.to_thread(interval, ctx, 0.2))
    twice, same_step, _ = analyse(recorder.calls())
    assert twice == {ctx.idempotency_key: (2, 2)}
    assert same_step == 1


def max_concurrency(calls: list[Call]) -> int:
    events = sorted((c.at, 1 if c.path.endswith("/start") else -1) for c in calls)
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak
