"""P1, retention: what one prune pass costs as the history it keeps grows (issue 16).

The same number of old finished runs (10 steps each) is pruned twice: once beside a kept
history of ``p1_runs / 10`` recent runs, once beside ``p1_runs`` (by default 100,000 and
1,000,000 runs: 1 and 10 million step rows). Runs and steps are written by SQL, as finished
runs are stored, not executed (it would take hours); the pass is the workers' own
(``run_retention.prune_runs``). Flat means the second pass costs about what the first did:
the target is the ratio of the two.
"""

from __future__ import annotations

import time
from uuid import UUID

import asyncpg

from agentflow.bench.context import BenchContext, chain, publish
from agentflow.bench.report import Target, WorkloadResult
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.store import run_retention

STEPS = 10
CHUNK = 20_000  # runs per seeding statement
TARGET_RATIO = 1.5

_SEED_RUNS = """
INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input, state, step_seq,
                  created_at, started_at, updated_at, completed_at)
SELECT $1, gen_random_uuid(), $2, 1, 'completed', '{}', '{}', $4,
       now() - make_interval(days => $5), now() - make_interval(days => $5),
       now() - make_interval(days => $5), now() - make_interval(days => $5)
FROM generate_series(1, $3)
RETURNING id
"""
_SEED_STEPS = """
INSERT INTO run_steps (workspace_id, run_id, seq, attempt, node_id, kind, name, status, input, output,
                       idempotency_key, worker, fencing_token, started_at, finished_at)
SELECT $1, r.id, s, 1, 's' || s, 'tool', 'noop', 'completed', '{}', '{"ok": true}',
       r.id::text || ':' || s, 'bench', 1, now(), now()
FROM unnest($2::uuid[]) AS r(id), generate_series(0, $3 - 1) AS s
"""


async def seed(pool: asyncpg.Pool, workflow_id: UUID, runs: int, days_ago: int) -> None:
    """Store ``runs`` finished runs of ``STEPS`` steps each that ended ``days_ago`` days ago."""
    for start in range(0, runs, CHUNK):
        async with pool.acquire() as conn, conn.transaction():
            ids = [r["id"] for r in await conn.fetch(
                _SEED_RUNS, DEFAULT_WORKSPACE, workflow_id, min(CHUNK, runs - start), STEPS, days_ago
            )]  # fmt: skip
            await conn.execute(_SEED_STEPS, DEFAULT_WORKSPACE, ids, STEPS)


async def timed_prune(pool: asyncpg.Pool, expected: int) -> float:
    """Seconds one pass takes to delete the ``expected`` old runs, from a settled database:
    vacuumed and analyzed (as autovacuum would leave it), its dirty pages written."""
    for table in ("runs", "run_steps"):
        await pool.execute(f"VACUUM (ANALYZE) {table}")
    await pool.execute("CHECKPOINT")
    began = time.perf_counter()
    pruned = await run_retention.prune_runs(pool, 0)
    seconds = time.perf_counter() - began
    if pruned.total != expected:
        raise RuntimeError(f"the pass deleted {pruned.total} runs, not the {expected} old ones")
    return seconds


async def p1(ctx: BenchContext) -> WorkloadResult:
    """Prune cost per 1,000 old runs beside a small and a ten times larger kept history."""
    large, old = ctx.sizes.p1_runs, ctx.sizes.p1_old
    small = large // 10
    result = WorkloadResult(
        "P1",
        f"retention: prune {old} old runs ({old * STEPS} steps) beside {small} then {large} kept runs",
    )
    pool = ctx.engine.db.pool
    workflow_id = await publish(ctx.engine, chain("bench_p1", 1))
    await pool.execute("UPDATE workspaces SET run_retention_days = 30 WHERE id = $1", DEFAULT_WORKSPACE)
    passes: list[tuple[int, float]] = []
    kept = 0
    for history in (small, large):
        ctx.progress(f"P1: storing {history - kept} finished runs to keep and {old} old ones")
        began = time.perf_counter()
        await seed(pool, workflow_id, history - kept, days_ago=1)
        await seed(pool, workflow_id, old, days_ago=40)
        kept = history
        ctx.progress(f"P1: stored in {time.perf_counter() - began:.0f}s; pruning")
        passes.append((history * STEPS, await timed_prune(pool, old)))
    for rows, seconds in passes:
        result.add(
            f"prune, per 1,000 runs, beside {rows:,} kept step rows",
            1000 * seconds * 1000 / old,
            "ms",
            floor=ctx.floor.commit.p50,
        )
    ratio = passes[1][1] / passes[0][1]
    result.add("prune time, 10x history / 1x history", ratio, "x", target=Target("<=", TARGET_RATIO, "x"))
    result.details = {"steps_per_run": STEPS, "old_runs": old, "kept_runs": [small, large]}
    result.details["passes"] = [{"kept_step_rows": rows, "seconds": seconds} for rows, seconds in passes]
    return result
