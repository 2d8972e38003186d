"""W2, step overhead, and W3, start latency: one run at a time on one worker process.

W2 runs a long chain of trivial steps; a step's cost is the time between consecutive
``finished_at`` of the run (its node, its checkpoint, and the worker's bookkeeping). The
workflow holds up to 1,000 nodes, so W2 is one run of 1,000 steps.

W3 starts runs one at a time while an idle worker listens; a start's latency is from the
run's ``created_at`` (the start statement's ``now()``) to its first step's ``started_at``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict

from agentflow.bench import queries
from agentflow.bench.context import BenchContext, chain, publish
from agentflow.bench.floor import measure_idle_commits
from agentflow.bench.processes import worker_group
from agentflow.bench.report import Target, WorkloadResult
from agentflow.bench.stats import Summary
from agentflow.engine import Engine

MAX_NODES = 1000  # StructuredConfig.nodes max_length
TARGET_STEP_FLOOR_RATIO = 2.0
TARGET_START_P50_MS = 3.0
ISSUE_17_STEP_FLOOR_RATIO = 1.5
ISSUE_17_START_P50_MS = 1.0
IDLE_BETWEEN_STARTS = 0.01  # seconds the worker and the client sit idle before each W3 start


async def w2(ctx: BenchContext) -> WorkloadResult:
    """Per-step latency of long sequential runs (p50/p99), with early and late steps apart."""
    steps = min(ctx.sizes.w2_steps, MAX_NODES)
    runs = ctx.sizes.w2_runs
    result = WorkloadResult(
        "W2", f"step overhead: {runs} run(s) of {steps} sequential trivial steps, one worker process"
    )
    pool = ctx.engine.db.pool
    workflow = await publish(ctx.engine, chain("bench_w2", steps))
    gaps: list[tuple[int, float, float]] = []
    ctx.progress(f"W2: {runs} run(s) of {steps} steps")
    async with worker_group(ctx.url, 1, 1) as group:
        cpu = group.cpu_seconds()
        for index in range(runs):
            run = await ctx.engine.start_run(workflow)
            await queries.wait_until_ended(pool, workflow, index + 1, timeout=60 + steps / 10)
            gaps.extend(await queries.step_gaps(pool, run.id))
        cpu = group.cpu_seconds() - cpu
        group.check_alive()

    per_step = Summary.of([gap for _seq, gap, _ran in gaps]).scaled(1000)
    node_time = Summary.of([ran for _seq, _gap, ran in gaps]).scaled(1000)
    tenth = max(steps // 10, 1)
    early = Summary.of([gap for seq, gap, _ in gaps if seq <= tenth]).scaled(1000)
    late = Summary.of([gap for seq, gap, _ in gaps if seq >= steps - tenth]).scaled(1000)
    commit = ctx.floor.commit.p50
    result.add(
        "p50 per step",
        per_step.p50,
        "ms",
        floor=commit,
        target=Target("<=", round(TARGET_STEP_FLOOR_RATIO * commit, 3), "ms (2× floor)"),
    )
    result.add(
        "p50 per step, against issue 17",
        per_step.p50,
        "ms",
        floor=commit,
        target=Target("<=", round(ISSUE_17_STEP_FLOOR_RATIO * commit, 3), "ms (1.5× floor)"),
    )
    result.add("p99 per step", per_step.p99, "ms", floor=commit)
    result.add("mean per step", per_step.mean, "ms", floor=commit)
    result.add("p50 executing (node + planner, no I/O)", node_time.p50, "ms", floor=commit)
    # The CPU between a step's commits, which the next commit pays for too (floor.py, paced).
    result.add("worker CPU per step (user + system)", cpu * 1000 / (runs * steps), "ms")
    result.add(f"p50 per step, steps 1-{tenth}", early.p50, "ms", floor=commit)
    result.add(f"p50 per step, last {tenth} steps", late.p50, "ms", floor=commit)
    result.details = {
        "runs": runs,
        "steps_per_run": steps,
        "samples": per_step.n,
        "worker": "one `agentflow worker --concurrency 1` subprocess",
        "node_limit": f"{MAX_NODES} nodes per workflow (core.definitions.StructuredConfig.nodes)",
        "per_step_ms": asdict(per_step),
        "node_ms": asdict(node_time),
        "worker_cpu_ms_per_step": cpu * 1000 / (runs * steps),
    }
    return result


async def w3(ctx: BenchContext) -> WorkloadResult:
    """Start latency with an idle worker: created -> claimed -> first step started."""
    n = ctx.sizes.w3_starts
    result = WorkloadResult("W3", f"start latency: {n} starts one at a time, one idle worker process")
    pool = ctx.engine.db.pool
    workflow = await publish(ctx.engine, chain("bench_w3", 1))
    calls: list[float] = []
    # The same commit after the same idle gap as each start below (see measure_idle_commits).
    idle = await measure_idle_commits(ctx.url, min(n, 100), IDLE_BETWEEN_STARTS)
    ctx.progress(f"W3: {n} starts, one at a time")
    async with worker_group(ctx.url, 1, ctx.concurrency) as group:
        await asyncio.sleep(0.5)  # let the worker finish starting up and go idle
        for index in range(n):
            began = time.perf_counter()
            await ctx.engine.start_run(workflow)
            calls.append(time.perf_counter() - began)
            await asyncio.sleep(0.01)
            await queries.wait_until_ended(pool, workflow, index + 1, timeout=30, poll=0.005)
            await asyncio.sleep(IDLE_BETWEEN_STARTS)  # the worker is idle again before the next start
        group.check_alive()
    eager = await _eager_starts(ctx, n)

    latencies = await queries.start_latencies(pool, workflow)
    to_step = Summary.of([stepped for _claimed, stepped in latencies]).scaled(1000)
    to_claim = Summary.of([claimed for claimed, _stepped in latencies]).scaled(1000)
    call = Summary.of(calls).scaled(1000)
    commit = ctx.floor.commit.p50
    result.add(
        "p50 start -> first step running",
        to_step.p50,
        "ms",
        floor=commit,
        target=Target("<=", TARGET_START_P50_MS, "ms"),
    )
    result.add(
        "p50 start -> first step running, against issue 17",
        to_step.p50,
        "ms",
        floor=commit,
        target=Target("<=", ISSUE_17_START_P50_MS, "ms"),
    )
    result.add("p99 start -> first step running", to_step.p99, "ms", floor=commit)
    result.add("idle floor: INSERT+COMMIT p50 after 10 ms idle", idle.p50, "ms", floor=commit)
    result.add("p50 start -> first step running, × idle floor", to_step.p50 / idle.p50, "×")
    result.add("p50 start -> claimed", to_claim.p50, "ms", floor=commit)
    result.add("p50 Engine.start_run call (client clock)", call.p50, "ms", floor=commit)
    result.add(
        "p50 start -> first step running, eager start",
        eager.p50,
        "ms",
        floor=commit,
        target=Target("<=", ISSUE_17_START_P50_MS, "ms"),
    )
    result.add("p99 start -> first step running, eager start", eager.p99, "ms", floor=commit)
    result.details = {
        "starts": n,
        "samples": to_step.n,
        "worker": f"one `agentflow worker --concurrency {ctx.concurrency}` subprocess, idle between starts",
        "start_to_step_ms": asdict(to_step),
        "start_to_claim_ms": asdict(to_claim),
        "start_run_call_ms": asdict(call),
        "idle_commit_ms": asdict(idle),
        "eager": "the same starts from an engine with eager_start whose worker runs in its process",
        "eager_start_to_step_ms": asdict(eager),
    }
    return result


async def _eager_starts(ctx: BenchContext, n: int) -> Summary:
    """W3's starts made eagerly: the client's own engine runs the worker (``eager_start``), so
    a start inserts its run held by that worker, which runs it at once (no NOTIFY, no claim)."""
    ctx.progress(f"W3: {n} eager starts, one at a time")
    engine = await Engine.connect(
        ctx.engine.settings.model_copy(update={"eager_start": True}), migrate_schema=False
    )
    try:
        workflow = await publish(engine, chain("bench_w3_eager", 1))
        worker = engine.worker(concurrency=ctx.concurrency, dispatch=False)
        running = asyncio.create_task(worker.run())
        try:
            await worker.wait_until_running()
            for index in range(n):
                await engine.start_run(workflow)
                await asyncio.sleep(0.01)
                await queries.wait_until_ended(engine.db.pool, workflow, index + 1, timeout=30, poll=0.005)
                await asyncio.sleep(IDLE_BETWEEN_STARTS)
        finally:
            worker.stop()
            await running
        latencies = await queries.start_latencies(engine.db.pool, workflow)
    finally:
        await engine.close()
    return Summary.of([stepped for _claimed, stepped in latencies]).scaled(1000)
