"""E3, dispatch: how fast the dispatcher drains the log while 100 workflows listen.

Workflow k (of 100) is enabled, has one trivial step and a trigger with topics and
conditions: even k listen to ``bench.e3.*``, odd k to ``[bench.e3.update, bench.e3.other]``;
the conditions are ``data.bucket equals k`` and ``data.tier one_of [gold, silver]``. Every
event is ``bench.e3.update`` with tier gold, so it passes the topic filter of all 100
workflows and has their conditions checked (100 decisions); even events carry a bucket
0-99 and start exactly one run, odd events a bucket 100-199 and start none.

One worker process runs (its dispatcher idle) while the events are published in batches of
500 under a *hold*: an open transaction with an xid, below which consumers never read
(docs/event-log.md). Committing the hold makes every event readable at once. The drain time
runs from the ``clock_timestamp()`` just before that commit to the first poll (every 20 ms)
that sees the dispatcher's cursor at the last event, both on the database clock. The same
worker also executes the runs its dispatcher starts (one trivial step each). The rates of
the dispatcher's first and last transactions (batches of events) are reported apart, from
their decisions' ``created_at`` (each transaction's ``now()``): a decision costs more as
``dispatch_decisions`` grows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentflow.bench import queries
from agentflow.bench.context import BenchContext, publish, triggered
from agentflow.bench.processes import worker_group
from agentflow.bench.report import Target, WorkloadResult
from agentflow.runtime.dispatcher import CONSUMER_NAME

TOPIC = "bench.e3.update"
BATCH = 500
POLL = 0.02
TARGET_EVENTS_PER_S = 1000.0  # issue 17


def listener(k: int) -> dict[str, Any]:
    """Workflow ``k``: matches events of bucket ``k`` with a gold or silver tier."""
    topics = ["bench.e3.*"] if k % 2 == 0 else [TOPIC, "bench.e3.other"]
    conditions = {
        "all": [
            {"path": "data.bucket", "op": "equals", "value": k},
            {"path": "data.tier", "op": "one_of", "value": ["gold", "silver"]},
        ]
    }
    return triggered(f"bench_e3_{k:03d}", {"topics": topics, "conditions": conditions})


def bucket(i: int, workflows: int) -> int:
    """Event ``i``'s bucket: even events cycle through the workflows' buckets (each starts
    one run), odd ones through as many buckets that no workflow has (they start none)."""
    return (i % 2) * workflows + (i // 2) % workflows


def batch_rates(batches: list[tuple[datetime, int]], end: datetime) -> list[tuple[int, float]]:
    """(events, events/s) of each dispatcher transaction: its events over the time from its
    start to the next one's (the last one's: to ``end``)."""
    ends = [began for began, _ in batches[1:]] + [end]
    return [
        (events, events / max((until - began).total_seconds(), 1e-6))
        for (began, events), until in zip(batches, ends, strict=True)
    ]


async def e3(ctx: BenchContext) -> WorkloadResult:
    """Events/s (and decisions/s) the dispatcher drains with 100 listening workflows."""
    n, workflows = ctx.sizes.e3_events, ctx.sizes.e3_workflows
    result = WorkloadResult(
        "E3", f"dispatch: {n} events against {workflows} workflows with conditions, one worker process"
    )
    pool = ctx.engine.db.pool
    ctx.progress(f"E3: publishing {workflows} listening workflows")
    for k in range(workflows):
        await publish(ctx.engine, listener(k))
    events = [
        {"topic": TOPIC, "message_id": f"e3-{i}", "data": {"bucket": bucket(i, workflows), "tier": "gold"}}
        for i in range(n)
    ]
    ctx.progress(f"E3: {n} events held back, then dispatched by one worker process")
    async with worker_group(ctx.url, 1, ctx.concurrency) as group:
        async with queries.EventHold(pool) as hold:
            for start in range(0, n, BATCH):
                await ctx.engine.events.publish(events[start : start + BATCH])
            before = await queries.decisions(pool)
            released = await hold.release()
        drained = await queries.wait_until_consumed(pool, CONSUMER_NAME, timeout=60 + n / 5, poll=POLL)
        decided = await queries.decisions(pool)
        batches = await queries.decision_batches(pool)
        started = decided.by_decision.get("started", 0)
        statuses = await queries.wait_until_ended(pool, None, started, timeout=60 + started / 20)
        group.check_alive()

    seconds = (drained - released).total_seconds()
    matched = sum(1 for i in range(n) if bucket(i, workflows) < workflows)
    floor = ctx.floor
    result.add(
        f"events/s dispatched ({workflows} workflows)",
        n / seconds,
        "events/s",
        floor=floor.commits_per_s,
        target=Target(">=", TARGET_EVENTS_PER_S, "events/s"),
    )
    pairs_per_s = decided.pairs / seconds
    result.add("decisions/s ((event, workflow) pairs)", pairs_per_s, "decisions/s", floor=floor.commits_per_s)
    result.add("mean time per event", 1000 * seconds / n, "ms", floor=floor.commit.p50)
    # Each decision costs more as dispatch_decisions grows: the first and the last of the
    # dispatcher's transactions apart show by how much.
    rates = batch_rates(batches, drained)
    for label, (count, rate) in (("first", rates[0]), ("last", rates[-1])):
        name = f"events/s, {label} dispatcher batch ({count} events)"
        result.add(name, rate, "events/s", floor=floor.commits_per_s)
    result.add("events matched (started a run)", 100 * decided.events_started / n, "%")
    result.add(
        "events unmatched (no workflow's conditions held)", 100 * (n - decided.events_started) / n, "%"
    )
    result.add("(event, workflow) pairs matched", 100 * started / max(decided.pairs, 1), "%")
    result.details = {
        "events": n,
        "workflows": workflows,
        "events_expected_to_match": matched,
        "events_decided": decided.events,
        "events_started": decided.events_started,
        "decisions": decided.by_decision,
        "decision_pairs": decided.pairs,
        "decisions_before_release": before.pairs,
        "drain_seconds": seconds,
        "first_batch_after_release_ms": (batches[0][0] - released).total_seconds() * 1000,
        "batches": [{"events": count, "events_per_s": rate} for count, rate in rates],
        "poll_seconds": POLL,
        "run_statuses": statuses,
        "worker": f"one `agentflow worker --concurrency {ctx.concurrency}` subprocess: its dispatcher"
        " decides, and it also executes the started runs (one trivial step each)",
    }
    return result
