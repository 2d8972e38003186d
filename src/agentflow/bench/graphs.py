"""G1, graph cost: what a node costs in a linear graph and in a graph of diamonds.

Runs of each graph go one at a time through one worker process (concurrency 1). A node's
cost is the time between consecutive ``finished_at`` of the run's steps (its execution, its
checkpoint, the frontier's bookkeeping), as in W2. The graphs come in three sizes so that
the bytes a run writes (its step rows and its final state) can be seen to grow linearly
with its nodes, not faster.
"""

from __future__ import annotations

import itertools
from typing import Any
from uuid import UUID

from agentflow.bench import queries
from agentflow.bench.context import BenchContext, publish
from agentflow.bench.processes import worker_group
from agentflow.bench.report import Target, WorkloadResult
from agentflow.bench.stats import Summary
from agentflow.bench.tools import NOOP

TARGET_NODE_FLOOR_RATIO = 2.0
SIZES = (10, 20, 40)


def linear(name: str, nodes: int) -> dict[str, Any]:
    """``nodes`` trivial steps in a row, linked by edges."""
    ids = [f"n{i}" for i in range(nodes)]
    edges = [{"from": a, "to": b} for a, b in itertools.pairwise(ids)]
    return {"name": name, "kind": "structured", "nodes": [_noop(i) for i in ids], "edges": edges}


def diamonds(name: str, nodes: int) -> dict[str, Any]:
    """A start, then diamonds (two parallel steps and a merge) in a row, then an end:
    ``nodes`` in all (rounded down to 2 + 3k)."""
    count = max((nodes - 2) // 3, 1)
    built = [_noop("start")]
    edges: list[dict[str, str]] = []
    previous = "start"
    for k in range(count):
        left, right, join = f"l{k}", f"r{k}", f"m{k}"
        built += [_noop(left), _noop(right), {"id": join, "type": "merge"}]
        edges += [{"from": previous, "to": left}, {"from": previous, "to": right}]
        edges += [{"from": left, "to": join}, {"from": right, "to": join}]
        previous = join
    built.append(_noop("end"))
    edges.append({"from": previous, "to": "end"})
    return {"name": name, "kind": "structured", "nodes": built, "edges": edges}


def mixed(name: str, nodes: int) -> dict[str, Any]:
    """``nodes`` in a row, as a flow that shapes data around its calls: a trivial step, a
    condition (always its default port), a mapping, and again (two nodes in three pure)."""
    ids = [f"n{i}" for i in range(nodes)]
    built: list[dict[str, Any]] = []
    edges: list[dict[str, str]] = []
    for i, node_id in enumerate(ids):
        if i % 3 == 0:
            built.append(_noop(node_id))
        elif i % 3 == 1:
            rare = {"port": "rare", "when": {"path": "payload.rare", "op": "exists"}}
            built.append({"id": node_id, "type": "condition", "branches": [rare]})
        else:
            built.append({"id": node_id, "type": "mapping", "output": {"node": i, "seen": "{{ input }}"}})
        if i:
            port = "default" if i % 3 == 2 else "result"
            edges.append({"from": ids[i - 1], "port": port, "to": node_id})
    return {"name": name, "kind": "structured", "nodes": built, "edges": edges}


def _noop(node_id: str) -> dict[str, Any]:
    return {"id": node_id, "type": "tool", "tool": NOOP}


async def g1(ctx: BenchContext) -> WorkloadResult:
    """Per-node cost (each run's time over its nodes, × floor), commits and bytes written per
    node: linear and diamond graphs of calls, and a flow with conditions and mappings."""
    runs = max(ctx.sizes.w3_starts // 6, 3)
    result = WorkloadResult("G1", f"graph cost: {runs} runs of each graph, one worker process")
    pool = ctx.engine.db.pool
    commit = ctx.floor.commit.p50
    shapes = {"linear": linear, "diamond": diamonds, "mixed": mixed}
    details: dict[str, Any] = {"runs_per_graph": runs, "bytes": {}, "commits_per_node": {}}
    async with worker_group(ctx.url, 1, 1) as group:
        for shape, build in shapes.items():
            gaps: list[float] = []
            means: list[float] = []
            commits = 0
            for size in SIZES:
                config = build(f"bench_g1_{shape}_{size}", size)
                workflow = await publish(ctx.engine, config)
                ctx.progress(f"G1: {runs} runs of a {len(config['nodes'])}-node {shape} graph")
                written: list[int] = []
                for index in range(runs):
                    run = await ctx.engine.start_run(workflow)
                    await queries.wait_until_ended(pool, workflow, index + 1, timeout=60)
                    if size == SIZES[1]:
                        ran = [gap for _seq, gap, _ran in await queries.step_gaps(pool, run.id)]
                        gaps.extend(ran)
                        means.append(sum(ran) / len(ran))
                        commits += await pool.fetchval(
                            "SELECT count(DISTINCT xmin::text) FROM run_steps WHERE run_id = $1", run.id
                        )
                    written.append(await _bytes_written(pool, run.id))
                details["bytes"][f"{shape} {len(config['nodes'])} nodes"] = {
                    "per_run": max(written),
                    "per_node": round(max(written) / len(config["nodes"]), 1),
                }
            nodes = len(build("x", SIZES[1])["nodes"])
            label = f"{nodes}-node {shape}" + (" (2 in 3 pure)" if shape == "mixed" else "")
            target = None
            if shape != "mixed":  # issue 11's two graphs
                target = Target("<=", round(TARGET_NODE_FLOOR_RATIO * commit, 3), "ms (2× floor)")
            mean = Summary.of(means).scaled(1000)
            result.add(f"mean per node, {label}", mean.p50, "ms", floor=commit, target=target)
            per_node = Summary.of(gaps).scaled(1000)
            result.add(f"p50 per node gap, {label}", per_node.p50, "ms", floor=commit)
            result.add(f"p99 per node gap, {label}", per_node.p99, "ms", floor=commit)
            details["commits_per_node"][shape] = round(commits / (runs * nodes), 3)
            result.add(f"commits per node, {label}", commits / (runs * nodes), "commits")
            small = details["bytes"][f"{shape} {len(build('x', SIZES[0])['nodes'])} nodes"]["per_node"]
            large = details["bytes"][f"{shape} {len(build('x', SIZES[-1])['nodes'])} nodes"]["per_node"]
            result.add(f"bytes per node, {shape}, {SIZES[-1]} vs {SIZES[0]} nodes", large / small, "×")
        group.check_alive()
    result.details = details
    return result


async def _bytes_written(pool: Any, run_id: UUID) -> int:
    """The run's step rows and its final state, in bytes as stored."""
    value = await pool.fetchval(
        "SELECT (SELECT coalesce(sum(pg_column_size(s.*)), 0) FROM run_steps s WHERE s.run_id = $1)"
        " + (SELECT pg_column_size(state) FROM runs WHERE id = $1)",
        run_id,
    )
    return int(value)


TARGET_W5_SECONDS = 1.0


def fan_out(name: str, items: int, concurrency: int) -> dict[str, Any]:
    """One for_each over ``items`` trivial items, joined."""
    return {
        "name": name,
        "kind": "structured",
        "nodes": [
            {"id": "each", "type": "for_each", "items": f"{{{{ range({items}) | list }}}}",
             "concurrency": concurrency, "max_items": items},
            _noop("item"),
            {"id": "joined", "type": "finish", "output": "{{ input | length }}"},
        ],
        "edges": [{"from": "each", "port": "iteration", "to": "item"},
                  {"from": "each", "port": "done", "to": "joined"}],
    }  # fmt: skip


async def w5(ctx: BenchContext) -> WorkloadResult:
    """Wall time of one run that fans 1,000 trivial items out as child runs and joins them."""
    items = 1000 if ctx.sizes.w1_runs >= 1000 else 200
    concurrency = 100
    shape = f"one run, {items} items, concurrency {concurrency}, {ctx.workers} worker processes"
    result = WorkloadResult("W5", f"fan-out and join: {shape}")
    workflow = await publish(ctx.engine, fan_out("bench_w5", items, concurrency))
    ctx.progress(f"W5: one run of {items} items")
    async with worker_group(ctx.url, ctx.workers, ctx.concurrency) as group:
        run = await ctx.engine.start_run(workflow)
        done = await ctx.engine.wait_for_run(run.id, timeout=300)
        group.check_alive()
    if done.status != "completed" or done.completed_at is None:
        raise RuntimeError(f"the W5 run ended {done.status}: {done.error}")
    wall = (done.completed_at - done.created_at).total_seconds()
    parent_steps = await ctx.engine.db.pool.fetchval(
        "SELECT count(*) FROM run_steps WHERE run_id = $1", run.id
    )
    result.add(
        f"wall, {items} items fanned out and joined", wall, "s", target=Target("<=", TARGET_W5_SECONDS, "s")
    )
    result.add("per item", wall / items * 1000, "ms", floor=ctx.floor.commit.p50)
    result.details = {
        "items": items,
        "concurrency": concurrency,
        "output": done.output,
        "parent_steps": parent_steps,
    }
    return result
