"""What an agent decision costs early and late in a long run: does it grow with the run?

    python benchmarks/long_agent_runs.py --decisions 40 --runs 8

A1 measures runs of four steps. This runs agent runs of ``--decisions`` decisions, one at a
time on one in-process worker with a scripted model (each decision creates a task with a
200-character description, the last completes), and prints the p50 of a decision's own
execution (its reads, its context, the model; not its checkpoint) over decisions 2-6 and over
the last five. What a decision reads and builds should not grow with the steps before it;
the tasks it shows the model (one more each decision) and the context's summary of older
decisions do.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

from agentflow.bench.agent_steps import agent_workflow
from agentflow.bench.database import bench_server
from agentflow.core.chat import Message, ModelRequest, ToolCall
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from agentflow.settings import Settings


def creating(decisions: int) -> ScriptedProvider:
    """A model that creates a task at each decision and completes at the ``decisions``-th
    (runs go one at a time, so one count serves them all)."""
    made = [0]

    def respond(request: ModelRequest) -> Message:
        n = made[0]
        made[0] = 0 if n + 1 >= decisions else n + 1
        if n + 1 >= decisions:
            return Message("assistant", "", (ToolCall("done", "complete", {"summary": "ok"}),))
        task = {"title": f"Task {n}", "description": "x" * 200, "priority": "high"}
        return Message("assistant", "", (ToolCall(f"c{n}", "create_task", task),))

    return ScriptedProvider(respond)


async def measure(decisions: int, runs: int) -> dict[str, float]:
    """Decision execution p50 (ms) early and late in ``runs`` runs of ``decisions`` decisions."""
    async with (
        bench_server(None) as server,
        server.database() as url,
        Engine.open(Settings(database_url=url)) as engine,
    ):
        config: dict[str, Any] = agent_workflow("long_agent_runs", "long")
        config["budget"] = {"max_model_calls": decisions + 1, "max_tool_calls": decisions + 1}
        config["budget"]["max_tokens"] = 100_000_000
        await engine.publish_workflow(config)
        worker = engine.worker(concurrency=1, model=creating(decisions))
        task = asyncio.create_task(worker.run())
        ids = []
        for i in range(runs):
            run = await engine.start_run("long_agent_runs", {"run": i})
            run = await engine.wait_for_run(run.id, timeout=300)
            assert run.status == "completed", (run.status, run.error)
            ids.append(run.id)
        worker.stop()
        await task
        rows = await engine.db.pool.fetch(
            "SELECT seq, extract(epoch FROM finished_at - started_at)::float8 AS ran FROM run_steps"
            " WHERE run_id = ANY($1) AND kind = 'agent.decide' AND status = 'completed'",
            ids,
        )
    by_position: dict[int, list[float]] = {}
    for row in rows:
        by_position.setdefault(row["seq"] // 2, []).append(row["ran"] * 1000)
    positions = sorted(by_position)
    early = [ms for p in positions[1:6] for ms in by_position[p]]
    late = [ms for p in positions[-5:] for ms in by_position[p]]
    return {"early": statistics.median(early), "late": statistics.median(late)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--decisions", type=int, default=40)
    parser.add_argument("--runs", type=int, default=8)
    args = parser.parse_args()
    p50 = asyncio.run(measure(args.decisions, args.runs))
    print(
        f"decision executing p50: decisions 2-6 {p50['early']:.3f} ms,"
        f" last 5 of {args.decisions} {p50['late']:.3f} ms"
    )


if __name__ == "__main__":
    main()
