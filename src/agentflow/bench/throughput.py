"""W1, throughput: N runs of three trivial steps on two worker processes.

Phase 1 (execution): the runs are started through ``Engine.start_run`` before any worker
exists, parked, then made due together once the workers are up; throughput is N over the
time from that instant to the last completion (both DB clock). Phase 2 (end to end): N
more runs are started while the workers run; throughput is N over the time from the first
run's creation to the last completion.
"""

from __future__ import annotations

import time

from agentflow.bench import queries
from agentflow.bench.context import BenchContext, chain, publish, start_many
from agentflow.bench.processes import worker_group
from agentflow.bench.report import Target, WorkloadResult

STEPS = 3
TARGET_RUNS_PER_S = 550.0
ISSUE_17_BASE_RUNS_PER_S = 564.0
"""W1 end to end when issue 17 was filed; its target is three times that."""
TARGET_E2E_RUNS_PER_S = 3 * ISSUE_17_BASE_RUNS_PER_S


async def w1(ctx: BenchContext) -> WorkloadResult:
    """Measure runs/s and steps/s of execution, and runs/s end to end."""
    result = WorkloadResult(
        "W1", f"throughput: runs of {STEPS} trivial steps on {ctx.workers} worker processes"
    )
    pool = ctx.engine.db.pool
    n = ctx.sizes.w1_runs
    timeout = 120 + n / 20
    executed = await publish(ctx.engine, chain("bench_w1", STEPS))
    ctx.progress(f"W1: starting {n} runs (no worker yet)")
    start_seconds = await start_many(ctx.engine, executed, n)
    await queries.park(pool, executed)
    ctx.progress(f"W1: {ctx.workers} workers (concurrency {ctx.concurrency}) execute them")
    async with worker_group(ctx.url, ctx.workers, ctx.concurrency) as group:
        xid_before = await queries.next_xid(pool)
        released = await queries.release(pool, executed)
        statuses = await queries.wait_until_ended(pool, executed, n, timeout)
        writes = await queries.next_xid(pool) - xid_before
        group.check_alive()
        execution = await queries.span(pool, executed)
        ctx.progress(f"W1: starting {n} more runs while the workers run")
        both = await publish(ctx.engine, chain("bench_w1_e2e", STEPS))
        began = time.perf_counter()
        e2e_start_seconds = await start_many(ctx.engine, both, n)
        e2e_statuses = await queries.wait_until_ended(pool, both, n, timeout)
        e2e_wall = time.perf_counter() - began
        group.check_alive()
        end_to_end = await queries.span(pool, both)

    exec_seconds = execution.seconds_since(released)
    e2e_seconds = end_to_end.seconds_since(end_to_end.first_created)
    floor = ctx.floor
    # A run costs one claim (shared by a batch) and one checkpoint per step: ~STEPS + 1
    # commits; starting it adds one more.
    result.add(
        "runs/s (execution)",
        execution.completed / exec_seconds,
        "runs/s",
        floor=floor.runs_per_s(STEPS + 1),
        target=Target(">=", TARGET_RUNS_PER_S, "runs/s"),
    )
    result.add(
        "steps/s (execution)",
        execution.completed * STEPS / exec_seconds,
        "steps/s",
        floor=floor.commits_per_s,
    )
    # Claims, begins, checkpoints and heartbeats; a group commit is one for many runs.
    result.add("write transactions per run (execution)", writes / n, "commits")
    result.add(
        "runs/s (end to end, with starts)",
        end_to_end.completed / e2e_seconds,
        "runs/s",
        floor=floor.runs_per_s(STEPS + 2),
        target=Target(">=", TARGET_E2E_RUNS_PER_S, "runs/s (3 × 564, issue 17)"),
    )
    result.add(
        "starts/s (Engine.start_run, 16 tasks)", n / start_seconds, "runs/s", floor=floor.commits_per_s
    )
    result.details = {
        "runs": n,
        "steps_per_run": STEPS,
        "workers": ctx.workers,
        "concurrency_per_worker": ctx.concurrency,
        "execution_seconds": exec_seconds,
        "execution_write_transactions": writes,
        "first_claim_after_release_ms": (execution.first_claimed - released).total_seconds() * 1000,
        "execution_statuses": statuses,
        "end_to_end_seconds": e2e_seconds,
        "end_to_end_wall_seconds": e2e_wall,
        "end_to_end_start_seconds": e2e_start_seconds,
        "end_to_end_statuses": e2e_statuses,
        "start_seconds_without_workers": start_seconds,
        "floor_runs_per_s": {
            "execution": floor.runs_per_s(STEPS + 1),
            "end_to_end": floor.runs_per_s(STEPS + 2),
        },
    }
    return result
