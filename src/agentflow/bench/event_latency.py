"""E2, event to first step: from publishing an event to the first step of the run it started.

One workflow listens (``trigger: {topics: [bench.e2]}``, one trivial step); one idle worker
process runs, and with it the dispatcher. Events are published one at a time through
``engine.events.publish``, each after the previous event's run has completed (plus 10 ms),
so the figure is latency, not queueing. Both ends are the database clock: the event's
``received_at`` (its publish statement's ``now()``) and the first step's ``started_at``;
the run is found through the dispatcher's recorded decision. The stages in between: the
run's ``created_at`` (the dispatcher transaction's ``now()``) and ``started_at`` (its claim).
The same events are then published to a worker with eager starts (``AGENTFLOW_EAGER_START``):
its dispatcher inserts the run held by that worker, which runs it with no claim.

The p99s are reported twice: over every event, and without the first :data:`COLD` after the
worker started, which pay its cold start (each statement planned anew, code run the first
time: 20-40 ms for the very first); the second is the steady state's tail.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict
from uuid import UUID

from agentflow.bench import queries
from agentflow.bench.context import BenchContext, publish, triggered
from agentflow.bench.processes import worker_group
from agentflow.bench.report import Target, WorkloadResult
from agentflow.bench.stats import Summary

TOPIC = "bench.e2"
EAGER_TOPIC = "bench.e2.eager"
TARGET_P50_MS = 50.0
COLD = 20
"""Events after a worker started that its p99 "once warm" leaves out."""


async def e2(ctx: BenchContext) -> WorkloadResult:
    """Event -> run created -> claimed -> first step running, one event at a time."""
    n = ctx.sizes.e2_publishes
    result = WorkloadResult(
        "E2", f"event to first step: {n} events one at a time, one idle worker process (with dispatcher)"
    )
    pool = ctx.engine.db.pool
    workflow = await publish(ctx.engine, triggered("bench_e2", {"topics": [TOPIC]}))
    ctx.progress(f"E2: {n} events, one at a time")
    calls = await _publish_one_at_a_time(ctx, workflow, TOPIC, n, {})
    samples = await queries.event_latencies(pool, workflow)
    decided = await queries.decisions(pool)
    eager_workflow = await publish(ctx.engine, triggered("bench_e2_eager", {"topics": [EAGER_TOPIC]}))
    ctx.progress(f"E2: {n} events, one at a time, eager starts")
    await _publish_one_at_a_time(ctx, eager_workflow, EAGER_TOPIC, n, {"AGENTFLOW_EAGER_START": "true"})
    eager_steps = [stepped for _c, _cl, stepped in await queries.event_latencies(pool, eager_workflow)]
    eager = Summary.of(eager_steps).scaled(1000)
    eager_warm = Summary.of(eager_steps[COLD:] or eager_steps).scaled(1000)
    to_step = Summary.of([stepped for _c, _cl, stepped in samples]).scaled(1000)
    warm = Summary.of([stepped for _c, _cl, stepped in samples[COLD:] or samples]).scaled(1000)
    to_run = Summary.of([created for created, _cl, _s in samples]).scaled(1000)
    to_claim = Summary.of([claimed for _c, claimed, _s in samples]).scaled(1000)
    call = Summary.of(calls).scaled(1000)
    commit = ctx.floor.commit.p50
    result.add(
        "p50 event -> first step running",
        to_step.p50,
        "ms",
        floor=commit,
        target=Target("<=", TARGET_P50_MS, "ms"),
    )
    result.add("p99 event -> first step running", to_step.p99, "ms", floor=commit)
    result.add(f"p99 event -> first step running, after the first {COLD}", warm.p99, "ms", floor=commit)
    result.add("p50 event -> run created (dispatcher)", to_run.p50, "ms", floor=commit)
    result.add("p99 event -> run created (dispatcher)", to_run.p99, "ms", floor=commit)
    result.add("p50 event -> run claimed", to_claim.p50, "ms", floor=commit)
    result.add("p50 engine.events.publish call (client clock)", call.p50, "ms", floor=commit)
    result.add("p50 event -> first step running, eager start", eager.p50, "ms", floor=commit)
    result.add("p99 event -> first step running, eager start", eager.p99, "ms", floor=commit)
    result.add(
        f"p99 event -> first step running, eager start, after the first {COLD}",
        eager_warm.p99,
        "ms",
        floor=commit,
    )
    result.details = {
        "events": n,
        "samples": to_step.n,
        "runs_started": decided.by_decision.get("started", 0),
        "decisions": decided.by_decision,
        "worker": f"one `agentflow worker --concurrency {ctx.concurrency}` subprocess (its dispatcher"
        " starts the runs), idle between events",
        "clocks": "database clock at both ends: events.received_at and run_steps.started_at",
        "event_to_step_ms": asdict(to_step),
        "event_to_run_ms": asdict(to_run),
        "event_to_claim_ms": asdict(to_claim),
        "publish_call_ms": asdict(call),
        "eager": "the same events to a worker with AGENTFLOW_EAGER_START=true (its dispatcher's runs"
        " held by it)",
        "eager_event_to_step_ms": asdict(eager),
        "cold_events": COLD,
        "event_to_step_after_cold_ms": asdict(warm),
        "eager_event_to_step_after_cold_ms": asdict(eager_warm),
    }
    return result


async def _publish_one_at_a_time(
    ctx: BenchContext, workflow: UUID, topic: str, n: int, settings: dict[str, str]
) -> list[float]:
    """Publish ``n`` events to ``topic``, each once the last one's run ended, with one idle
    worker process (its dispatcher starts the runs); the publish calls' seconds."""
    calls: list[float] = []
    async with worker_group(ctx.url, 1, ctx.concurrency, settings=settings) as group:
        await asyncio.sleep(0.5)  # let the worker and its dispatcher finish starting and go idle
        for index in range(n):
            event = {"topic": topic, "message_id": f"e2-{index}", "data": {"n": index}}
            began = time.perf_counter()
            await ctx.engine.events.publish([event])
            calls.append(time.perf_counter() - began)
            await asyncio.sleep(0.01)
            await queries.wait_until_ended(ctx.engine.db.pool, workflow, index + 1, timeout=30, poll=0.005)
            await asyncio.sleep(0.01)  # the worker and the dispatcher are idle before the next event
        group.check_alive()
    return calls
