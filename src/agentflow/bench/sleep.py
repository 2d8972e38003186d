"""W4, durable sleep: many runs wait, then wake; how late they wake, and worker memory.

Each run is a ``wait`` node and then one trivial step. Lateness is from the wait's due
time (the wait step's ``finished_at`` plus its duration, or its ``until``) to the
``started_at`` of the step after it, both DB clock. The workers' resident memory is
sampled throughout: a sleeping run is only an index entry, so it should not grow.

W4 sleeps 2 s; W4-10k starts 10,000 runs that sleep 10-60 s (uniformly, through
``until`` in the payload).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import asdict
from datetime import timedelta
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.bench import queries
from agentflow.bench.context import BenchContext, publish, sleeper, start_many
from agentflow.bench.processes import RssSampler, WorkerGroup, worker_group
from agentflow.bench.report import Target, WorkloadResult
from agentflow.bench.stats import Summary

TARGET_P99_2S_MS = 250.0
TARGET_P99_10K_MS = 100.0
TARGET_RSS_GROWTH_MB = 20.0


async def w4(ctx: BenchContext) -> WorkloadResult:
    """N runs sleep ``sizes.w4_sleep`` seconds."""
    n, seconds = ctx.sizes.w4_runs, ctx.sizes.w4_sleep
    result = WorkloadResult(
        "W4", f"durable sleep: {n} runs sleep {seconds:g}s, {ctx.workers} worker processes"
    )
    workflow = await publish(ctx.engine, sleeper("bench_w4", {"duration": f"{seconds}s"}))
    ctx.progress(f"W4: {n} runs sleep {seconds:g}s")
    async with worker_group(ctx.url, ctx.workers, ctx.concurrency) as group, RssSampler(group) as rss:
        rss.mark("ready")
        start_seconds = await start_many(ctx.engine, workflow, n)
        statuses = await queries.wait_until_ended(
            ctx.engine.db.pool, workflow, n, timeout=seconds + 60 + n / 20, poll=0.25
        )
        rss.mark("end")
        group.check_alive()
    await _lateness(ctx, result, workflow, TARGET_P99_2S_MS)
    _memory(result, rss)
    result.details.update(
        runs=n,
        sleep_seconds=seconds,
        workers=ctx.workers,
        concurrency_per_worker=ctx.concurrency,
        start_seconds=start_seconds,
        statuses=statuses,
    )
    return result


async def w4_10k(ctx: BenchContext) -> WorkloadResult:
    """Many runs sleep a uniformly random 10-60 s; memory must stay flat while they sleep."""
    n = ctx.sizes.w4_10k_runs
    low, high = ctx.sizes.w4_10k_sleep
    result = WorkloadResult(
        "W4-10k", f"durable sleep: {n} runs sleep {low:g}-{high:g}s, {ctx.workers} worker processes"
    )
    pool = ctx.engine.db.pool
    workflow = await publish(ctx.engine, sleeper("bench_w4_10k", {"until": "{{ payload.until }}"}))
    rand = random.Random(10_000)
    base = await queries.db_now(pool)
    began = time.monotonic()

    def payload(_i: int) -> dict[str, Any]:
        # Wake times on the DB clock: its reading at the start plus elapsed time and the sleep.
        offset = time.monotonic() - began + rand.uniform(low, high)
        return {"until": (base + timedelta(seconds=offset)).isoformat()}

    ctx.progress(f"W4-10k: {n} runs sleep {low:g}-{high:g}s (takes over {high:g}s)")
    async with worker_group(ctx.url, ctx.workers, ctx.concurrency) as group, RssSampler(group) as rss:
        rss.mark("ready")
        start_seconds = await start_many(ctx.engine, workflow, n, payload=payload)
        asleep = await _all_asleep(pool, group, workflow, timeout=high)
        rss.mark("asleep")
        ctx.progress(f"W4-10k: {n} runs started in {start_seconds:.1f}s; waiting for them to wake")
        statuses = await queries.wait_until_ended(pool, workflow, n, timeout=high + 60 + n / 20, poll=0.5)
        rss.mark("end")
        group.check_alive()
    await _lateness(ctx, result, workflow, TARGET_P99_10K_MS)
    _memory(result, rss)
    result.add(
        "RSS growth, all asleep -> end",
        rss.marks["end"] - rss.marks["asleep"],
        "MiB",
        target=Target("<=", TARGET_RSS_GROWTH_MB, "MiB"),
    )
    result.details.update(
        runs=n,
        sleep_seconds=[low, high],
        workers=ctx.workers,
        concurrency_per_worker=ctx.concurrency,
        start_seconds=start_seconds,
        all_asleep=asleep,
        statuses=statuses,
    )
    return result


async def _all_asleep(
    pool: asyncpg.Pool, group: WorkerGroup, workflow: UUID, timeout: float
) -> dict[str, Any]:
    """Wait until every run has checkpointed its wait step; say when, and how many sleep."""
    began = time.monotonic()
    while True:
        row = await pool.fetchrow(
            "SELECT count(*) FILTER (WHERE status = 'waiting') AS waiting,"
            " count(*) FILTER (WHERE step_seq = 0) AS unslept FROM runs WHERE workflow_id = $1",
            workflow,
        )
        assert row is not None
        elapsed = time.monotonic() - began
        if row["unslept"] == 0 or elapsed > timeout:
            return {
                "seconds": elapsed,
                "waiting": int(row["waiting"]),
                "not_yet_waiting": int(row["unslept"]),
            }
        group.check_alive()
        await asyncio.sleep(0.25)


async def _lateness(ctx: BenchContext, result: WorkloadResult, workflow: UUID, p99_ms: float) -> None:
    samples = await queries.wake_lateness(ctx.engine.db.pool, workflow)
    late = Summary.of([s for s, _ in samples]).scaled(1000)
    result.add("p50 wake lateness", late.p50, "ms")
    result.add("p99 wake lateness", late.p99, "ms", target=Target("<=", p99_ms, "ms"))
    result.add("max wake lateness", late.max, "ms")
    result.details["lateness_ms"] = asdict(late)
    # Wakes that compete with the start traffic, and wakes after it, apart.
    for label, during in (("while_starting", True), ("after_starts", False)):
        part = [s for s, d in samples if d is during]
        result.details[f"lateness_ms_{label}"] = asdict(Summary.of(part).scaled(1000)) if part else None


def _memory(result: WorkloadResult, rss: RssSampler) -> None:
    result.add("worker RSS at start", rss.marks["ready"], "MiB")
    result.add("worker RSS peak", rss.peak, "MiB")
    result.add("worker RSS at end", rss.marks["end"], "MiB")
    result.details["rss_mb"] = {**rss.marks, "peak": rss.peak, "samples": len(rss.samples)}
