"""A lone run's statements sent from its own task, against through the commit group's task.

    python benchmarks/lone_run_sends.py --runs 60
    AGENTFLOW_DATABASE_URL=postgresql://postgres@127.0.0.1/postgres python benchmarks/lone_run_sends.py

One process: an engine and its worker, runs one at a time, of a 200-node linear graph of
trivial steps (as G1's) and of A1's agent workflow (a decision, ``create_task``, a decision,
``complete``, on the scripted model). Run by run the worker's commit group takes turns: it
sends a lone run's statements from the run's own task (``solo``, the engine's behaviour) or
through its own task as for a group (``solo`` off), so that a slow moment of the machine
hits both alike. Prints each mode's p50 and mean step cost (the time between consecutive
``finished_at`` of a run's steps, as G1 and A1 report it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
from typing import Any

import agentflow.bench.tools  # noqa: F401  (registers the trivial tool)
from agentflow.bench import queries
from agentflow.bench.agent_steps import ACCOUNT, agent_workflow, meeting
from agentflow.bench.agent_worker import task_then_complete
from agentflow.bench.context import publish
from agentflow.bench.database import bench_server
from agentflow.bench.graphs import linear
from agentflow.engine import Engine
from agentflow.settings import Settings

MODES = ("through the group", "from the run's task")


async def measure(url: str, runs: int) -> dict[str, dict[str, list[float]]]:
    """Step gaps (seconds) by workload and mode."""
    found: dict[str, dict[str, list[float]]] = {}
    async with Engine.open(Settings(database_url=url)) as engine:
        pool = engine.db.pool
        await engine.accounts.upsert(ACCOUNT, name="Bench Co", owner="owner@bench.example")
        graph = await publish(engine, linear("lone_linear", 200))
        agent = await publish(engine, agent_workflow("lone_agent", "lonerun"))
        worker = engine.worker(concurrency=1, model=task_then_complete())
        running = asyncio.create_task(worker.run())
        solo = worker._commits._solo  # the engine's own predicate; None sends through the group
        try:
            await worker.wait_until_running()
            gaps: dict[str, dict[str, list[float]]] = {"G1 linear": {}, "A1 agent": {}}
            for index in range(runs + 4):  # the first four warm up
                mode = MODES[index % 2]
                worker._commits._solo = solo if index % 2 else None
                run = await engine.start_run(graph)
                await engine.wait_for_run(run.id, timeout=60)
                await engine.events.publish([meeting("lonerun", index)])
                await queries.wait_until_ended(pool, agent, index + 1, timeout=30, poll=0.005)
                if index < 4:
                    continue
                graph_gaps = [gap for _seq, gap, _ran in await queries.step_gaps(pool, run.id)]
                gaps["G1 linear"].setdefault(mode, []).extend(graph_gaps)
            agent_runs = await pool.fetch(
                "SELECT id, row_number() OVER (ORDER BY created_at) - 1 AS n"
                " FROM runs WHERE workflow_id = $1",
                agent,
            )
            order = {row["id"]: row["n"] for row in agent_runs}
            for step in await queries.step_times(pool, agent):
                if order[step.run_id] >= 4:
                    gaps["A1 agent"].setdefault(MODES[order[step.run_id] % 2], []).append(step.gap)
            found = gaps
        finally:
            worker.stop()
            await running
    return found


async def main(runs: int) -> None:
    async with bench_server(os.environ.get("AGENTFLOW_DATABASE_URL")) as server, server.database() as url:
        found = await measure(url, runs)
    for workload, modes in found.items():
        for mode, samples in modes.items():
            ms: Any = [s * 1000 for s in samples]
            print(
                f"{workload:10s} {mode:20s} p50 {statistics.median(ms):.3f} ms"
                f"  mean {statistics.mean(ms):.3f} ms  ({len(ms)} steps)"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=60, help="runs of each workflow (half per mode)")
    asyncio.run(main(parser.parse_args().runs))
