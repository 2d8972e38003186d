"""L1, model node overhead: what an ``llm`` node costs beyond its model's answer.

Runs of a 20-node linear graph of ``llm`` nodes go one at a time through one worker process
(concurrency 1), with the scripted model (no network: its answer takes microseconds). A
node's cost is the time between consecutive ``finished_at`` of the run's steps, as in G1: it
holds rendering the prompt, the workspace budget read, the call, recording the tokens and
cost on the step, the run and the workspace's day, and the checkpoint.
"""

from __future__ import annotations

import itertools
from typing import Any

from agentflow.bench import queries
from agentflow.bench.context import BenchContext, publish
from agentflow.bench.processes import worker_group
from agentflow.bench.report import Target, WorkloadResult
from agentflow.bench.stats import Summary

TARGET_LLM_FLOOR_RATIO = 3.0
NODES = 20


def llm_chain(name: str, nodes: int) -> dict[str, Any]:
    """``nodes`` llm nodes in a row, each prompted with the previous one's answer."""
    ids = [f"ask{i}" for i in range(nodes)]
    built = [
        {
            "id": node_id,
            "type": "llm",
            "system": "Be brief.",
            "prompt": "Go on from: {{ input.text | default('') }}",
        }
        for node_id in ids
    ]
    edges = [{"from": a, "to": b} for a, b in itertools.pairwise(ids)]
    return {"name": name, "kind": "structured", "nodes": built, "edges": edges}


async def l1(ctx: BenchContext) -> WorkloadResult:
    """Per-node cost of an llm node with the scripted model (p50, × floor)."""
    runs = max(ctx.sizes.w3_starts // 6, 3)
    result = WorkloadResult("L1", f"llm node overhead: {runs} runs of {NODES} llm nodes, one worker process")
    pool = ctx.engine.db.pool
    commit = ctx.floor.commit.p50
    workflow = await publish(ctx.engine, llm_chain("bench_l1", NODES))
    ctx.progress(f"L1: {runs} runs of {NODES} llm nodes")
    gaps: list[float] = []
    ran: list[float] = []
    async with worker_group(ctx.url, 1, 1) as group:
        for index in range(runs):
            run = await ctx.engine.start_run(workflow)
            await queries.wait_until_ended(pool, workflow, index + 1, timeout=60)
            for _seq, gap, took in await queries.step_gaps(pool, run.id):
                gaps.append(gap)
                ran.append(took)
        group.check_alive()
    failed = await pool.fetchval(
        "SELECT count(*) FROM runs WHERE workflow_id = $1 AND status <> 'completed'", workflow
    )
    if failed:
        raise RuntimeError(f"{failed} L1 run(s) did not complete")
    priced = await pool.fetchval(
        "SELECT count(*) FROM run_steps s JOIN runs r ON r.id = s.run_id"
        " WHERE r.workflow_id = $1 AND s.model IS NOT NULL AND s.input_tokens > 0",
        workflow,
    )
    per_node = Summary.of(gaps).scaled(1000)
    target = Target("<=", round(TARGET_LLM_FLOOR_RATIO * commit, 3), "ms (3× floor)")
    result.add("p50 per llm node", per_node.p50, "ms", floor=commit, target=target)
    result.add("p99 per llm node", per_node.p99, "ms", floor=commit)
    executing = Summary.of(ran).scaled(1000)
    result.add("p50 executing (render, budget read, model, no checkpoint)", executing.p50, "ms", floor=commit)
    result.details = {"runs": runs, "nodes": NODES, "model": "scripted", "steps_with_tokens": priced}
    return result
