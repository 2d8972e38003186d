"""S1, run search: each filter of the run list over a million runs (issue 15).

``s1_runs`` runs (1,000,000 by default) are written by SQL across ten workflows and 90 days,
with the spread a busy workspace has: statuses, accounts, enrollment keys, triggers,
conversations, called runs, run variables, tokens, cost and the models called. Then each
filter of ``GET /api/runs`` is asked ``REPEATS`` times with varied values through the engine's
own search (the first page of 50, as the list asks), and its p50 and p99 are reported; the
target is p99 under 100 ms for each.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from urllib.parse import parse_qsl
from uuid import UUID

import asyncpg

from agentflow.bench.context import BenchContext, chain, publish
from agentflow.bench.report import Target, WorkloadResult
from agentflow.bench.stats import Summary
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.run_filters import parse_run_filter

CHUNK = 50_000
REPEATS = 30
TARGET_MS = 100.0
WORKFLOWS = 10
MODELS = ("openai:gpt-4o-mini", "anthropic:claude-sonnet", "scripted:echo")

# $1 workspace, $2 workflow ids, $3 first series number, $4 count, $5 a called run's parent,
# $6 the models called.
_SEED = """
INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, due_at, enrollment_key, input,
                  state, step_seq, parent_run_id, input_tokens, output_tokens, usd_cost, costs, trigger,
                  conversation, account_id, created_at, started_at, updated_at, completed_at, canceled_at)
SELECT $1, gen_random_uuid(), ($2::uuid[])[1 + g % cardinality($2::uuid[])], 1, s.status,
       CASE WHEN s.status = 'waiting' THEN now() + interval '1 day' END,
       'key-' || g, '{}',
       jsonb_build_object('vars', jsonb_build_object('tier', (ARRAY['gold', 'silver', 'bronze'])[1 + g % 3],
                                                     'region', 'r' || g % 50)),
       3, CASE WHEN g % 1000 = 7 THEN $5::uuid END,
       g % 5000, g % 3000, (g % 1000) / 1000.0,
       jsonb_build_array(jsonb_build_object('key_type', ($6::text[])[1 + g % 3])),
       CASE WHEN g % 5 = 0 THEN NULL
            WHEN g % 4 = 0 THEN jsonb_build_object('source', 'event',
                                                   'event', jsonb_build_object('message_id', 'msg-' || g))
            ELSE jsonb_build_object('source', (ARRAY['event', 'public', 'private', 'schedule'])[1 + g % 4])
       END,
       CASE WHEN g % 10 = 0
            THEN jsonb_build_object('id', 'conv-' || g % 20000,
                                    'channel', (ARRAY['api', 'slack', 'email'])[1 + g % 3])
       END,
       'acct-' || g % 5000, t.created, t.created + interval '1 second', t.created,
       CASE WHEN s.status IN ('completed', 'failed') THEN t.created + make_interval(secs => 1 + g % 600) END,
       CASE WHEN s.status = 'canceled' THEN t.created + interval '5 seconds' END
FROM generate_series($3::bigint, $3::bigint + $4 - 1) AS g
CROSS JOIN LATERAL (SELECT now() - make_interval(secs => (g * 7919) % 7776000) AS created) t
CROSS JOIN LATERAL (SELECT CASE g % 20 WHEN 0 THEN 'failed' WHEN 1 THEN 'waiting' WHEN 2 THEN 'canceled'
                                       ELSE 'completed' END AS status) s
"""


async def seed(pool: asyncpg.Pool, workflow_ids: list[UUID], runs: int, parent: UUID) -> None:
    """Store ``runs`` runs spread as the module says."""
    for start in range(0, runs, CHUNK):
        count = min(CHUNK, runs - start)
        await pool.execute(_SEED, DEFAULT_WORKSPACE, workflow_ids, start, count, parent, list(MODELS))


def filters(workflow_ids: list[UUID], runs: int, parent: UUID) -> dict[str, Callable[[random.Random], str]]:
    """Each filter's query string, with a value drawn from what was stored."""

    def some(rng: random.Random) -> int:
        return rng.randrange(runs)

    return {
        "none (the newest page)": lambda rng: "",
        "status=waiting": lambda rng: "status=waiting",
        "status=failed": lambda rng: "status=failed",
        "workflow_id": lambda rng: f"workflow_id={rng.choice(workflow_ids)}",
        "version": lambda rng: "version=1",
        "trigger": lambda rng: f"trigger={rng.choice(['event', 'public', 'private', 'schedule', 'manual'])}",
        "enrollment_key": lambda rng: f"enrollment_key=key-{some(rng)}",
        # Runs whose number is 4 more than a multiple of 20 were started by an event msg-<number>.
        "trigger_id": lambda rng: f"trigger_id=msg-{rng.randrange(max(runs // 20, 1)) * 20 + 4}",
        "employee_id (none of the workflows)": lambda rng: f"employee_id={rng.choice(workflow_ids)}",
        "account_id": lambda rng: f"account_id=acct-{some(rng) % 5000}",
        "parent_run_id": lambda rng: f"parent_run_id={parent}",
        "conversation_id": lambda rng: f"conversation_id=conv-{some(rng) % 20000}",
        "channel": lambda rng: f"channel={rng.choice(['api', 'slack', 'email'])}",
        "model": lambda rng: f"model={rng.choice(MODELS)}",
        "state.tier": lambda rng: f"state[tier]={rng.choice(['gold', 'silver', 'bronze'])}",
        "state.region and state.tier (rare)": lambda rng: (
            f"state[region]=r{rng.randrange(50)}&state[tier]=gold"
        ),
        "started gte (last day)": lambda rng: "started[gte]=" + _ago(rng.uniform(0.5, 1.5)),
        "ended lt (older than 60 days)": lambda rng: "ended[lt]=" + _ago(60),
        "duration gte 590000 ms (rare)": lambda rng: "duration[gte]=590000",
        "tokens gte 7900 (rare)": lambda rng: "tokens[gte]=7900",
        "usd gte 0.999 (rare)": lambda rng: "usd[gte]=0.999",
        "workflow_id and status=waiting": lambda rng: (
            f"workflow_id={rng.choice(workflow_ids)}&status=waiting"
        ),
        "account_id and ended range": lambda rng: (
            f"account_id=acct-{some(rng) % 5000}&ended[gte]=" + _ago(30)
        ),
    }


def _ago(days: float) -> str:
    moment = time.time() - days * 86400
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(moment)).replace("+", "%2B")


async def s1(ctx: BenchContext) -> WorkloadResult:
    """p50 and p99 of each run list filter over ``s1_runs`` runs."""
    runs = ctx.sizes.s1_runs
    result = WorkloadResult("S1", f"run search: each filter's first page over {runs:,} runs")
    pool = ctx.engine.db.pool
    workflow_ids = [await publish(ctx.engine, chain(f"bench_s1_{i}", 1)) for i in range(WORKFLOWS)]
    parent = (await ctx.engine.start_run("bench_s1_0", {})).id
    ctx.progress(f"S1: storing {runs:,} runs")
    began = time.perf_counter()
    await seed(pool, workflow_ids, runs, parent)
    await pool.execute("VACUUM (ANALYZE) runs")
    ctx.progress(f"S1: stored in {time.perf_counter() - began:.0f}s; searching")
    rng = random.Random(1)
    full_pages: dict[str, int] = {}
    for name, query in filters(workflow_ids, runs, parent).items():
        timings = []
        full_pages[name] = 0
        for _ in range(REPEATS):
            wanted = parse_run_filter(_pairs(query(rng)))
            started = time.perf_counter()
            found = await ctx.engine.search_runs(wanted)
            timings.append((time.perf_counter() - started) * 1000)
            full_pages[name] += len(found) == wanted.limit
        summary = Summary.of(timings)
        result.add(f"{name}: p50", summary.p50, "ms")
        result.add(f"{name}: p99", summary.p99, "ms", target=Target("<=", TARGET_MS, "ms"))
    stored = await pool.fetchval(
        "SELECT count(*) FROM runs WHERE workflow_id = ANY($1::uuid[])", workflow_ids
    )
    result.details = {
        "runs": runs,
        "stored": stored - 1,
        "workflows": WORKFLOWS,
        "repeats": REPEATS,
        "page": 50,
    }
    result.details["full_pages"] = full_pages  # searches that found a whole page (a sanity check)
    return result


def _pairs(query: str) -> list[tuple[str, str]]:
    return parse_qsl(query, keep_blank_values=True)
