"""Where a lone run's time goes in a worker: wall-clock marks around the worker's functions.

    python benchmarks/worker_marks.py --workload W2 --runs 5
    python benchmarks/worker_marks.py --workload A1 --runs 150
    python benchmarks/worker_marks.py --workload W3 --runs 150
    python benchmarks/worker_marks.py --workload A1 --sync-commit-off   # a diagnosis only

One process on uvloop: an engine and its worker, runs one at a time (as `agentflow bench`'s
W2, A1 and W3 eager starts run them), on the embedded server or ``AGENTFLOW_DATABASE_URL``.
The functions named below are wrapped to note the time they are entered and left; the script
prints, for each pair of consecutive marks, the p50 of the time between them:

- W2 (one slot, runs of 1,000 trivial steps): by transition, over all steps (``conn`` is a
  statement's round trip in asyncpg, ``exec`` a step's execution, ``writer`` its write).
- A1 (one slot, A1's agent workflow on the scripted model) and W3 (eager starts after 10 ms
  idle): by position in the run, from the claim's answer (A1) or the ``start_run`` call (W3)
  to the last checkpoint's answer. A1's marks leave out single statements (``conn``): the
  process dispatches the events that start the runs, and its statements would interleave.

``--sync-commit-off`` sets ``synchronous_commit = off`` on the benchmark's database: how much
of each round trip is the commit's flush (never a setting to run the engine with).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import asyncpg
import asyncpg.connection
import uvloop

import agentflow.bench.tools  # noqa: F401  (registers the trivial tool)
from agentflow import run_starts
from agentflow.bench import queries
from agentflow.bench.agent_steps import ACCOUNT, agent_workflow, meeting
from agentflow.bench.agent_worker import task_then_complete
from agentflow.bench.context import chain, publish
from agentflow.bench.database import bench_server
from agentflow.bench.graphs import linear
from agentflow.engine import Engine
from agentflow.runtime import agent_step, step, step_writer
from agentflow.settings import Settings
from agentflow.store import agent_reads, commit_groups, runs

Mark = tuple[str, float]
marks: list[Mark] = []


def mark_around(owner: Any, name: str, label: str) -> None:
    """Note ``label>`` when ``owner.name`` (a coroutine function) is entered, ``label<`` when
    it returns."""
    wrapped: Callable[..., Any] = getattr(owner, name)

    async def marked(*args: Any, **kwargs: Any) -> Any:
        marks.append((label + ">", time.perf_counter()))
        result = await wrapped(*args, **kwargs)
        marks.append((label + "<", time.perf_counter()))
        return result

    setattr(owner, name, marked)


async def w2(engine: Engine, n: int) -> list[list[Mark]]:
    graph = await publish(engine, linear("marks_linear", 1000))
    worker = engine.worker(concurrency=1)
    running = asyncio.create_task(worker.run())
    await worker.wait_until_running()
    segments = []
    for index in range(n + 1):  # the first warms up
        marks.clear()
        run = await engine.start_run(graph)
        await engine.wait_for_run(run.id, timeout=120)
        if index:
            segments.append(list(marks))
    worker.stop()
    await running
    return segments


async def a1(engine: Engine, n: int) -> list[list[Mark]]:
    await engine.accounts.upsert(ACCOUNT, name="Bench Co", owner="owner@bench.example")
    agent = await publish(engine, agent_workflow("marks_agent", "marks"))
    worker = engine.worker(concurrency=1, model=task_then_complete())
    running = asyncio.create_task(worker.run())
    await worker.wait_until_running()
    segments = []
    for index in range(n + 5):  # the first five warm up
        marks.clear()
        await engine.events.publish([meeting("marks", index)])
        await queries.wait_until_ended(engine.db.pool, agent, index + 1, timeout=30, poll=0.005)
        await asyncio.sleep(0.01)
        if index >= 5:
            at = next(
                i for i in range(len(marks) - 1) if marks[i][0] == "claim<" and marks[i + 1][0] == "begin>"
            )
            segments.append(marks[at:])
    worker.stop()
    await running
    return segments


async def w3(engine: Engine, n: int) -> list[list[Mark]]:
    workflow = await publish(engine, chain("marks_eager", 1))
    worker = engine.worker(concurrency=8, dispatch=False)
    running = asyncio.create_task(worker.run())
    await worker.wait_until_running()
    segments = []
    for index in range(n + 5):
        marks.clear()
        await engine.start_run(workflow)
        await asyncio.sleep(0.01)
        await queries.wait_until_ended(engine.db.pool, workflow, index + 1, timeout=30, poll=0.005)
        await asyncio.sleep(0.01)  # idle before the next start, as W3
        if index >= 5:
            segments.append(marks[next(i for i, m in enumerate(marks) if m[0] == "start>") :])
    worker.stop()
    await running
    return segments


def report(segments: list[list[Mark]], by_position: bool) -> None:
    phases: dict[tuple[int, str, str], list[float]] = collections.defaultdict(list)
    for segment in segments:
        if by_position:  # up to the last checkpoint's answer
            last = max(i for i, m in enumerate(segment) if m[0] == "ckpt<")
            segment = segment[: last + 1]
            phases[(999, "total", "")].append((segment[-1][1] - segment[0][1]) * 1e6)
        for position, ((a, ta), (b, tb)) in enumerate(itertools.pairwise(segment)):
            phases[(position if by_position else 0, a, b)].append((tb - ta) * 1e6)
    least = len(segments) * 0.8
    for (position, a, b), spans in sorted(phases.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
        if len(spans) >= least:
            where = f"{position:3d} " if by_position else ""
            print(f"{where}{a:8s} -> {b:8s} n {len(spans):6d}  p50 {statistics.median(spans):8.1f} µs")


async def main(workload: str, n: int, sync_off: bool) -> None:
    mark_around(step_writer.StepWriter, "checkpoint", "ckpt")
    if workload != "A1":  # A1's process dispatches its events too: its statements would interleave
        mark_around(asyncpg.connection.Connection, "_execute", "conn")
    if workload == "W2":
        mark_around(commit_groups.CommitGroup, "_fetch_one", "fetch")
        mark_around(step_writer.StepWriter, "write_ahead", "writer")
        mark_around(step, "execute", "exec")
    elif workload == "A1":
        mark_around(runs, "claim", "claim")
        mark_around(agent_reads, "begin_reading", "begin")
        mark_around(agent_step, "execute", "exec")
    else:
        mark_around(run_starts.RunStarter, "start", "start")
        mark_around(step, "execute", "exec")
    async with bench_server(os.environ.get("AGENTFLOW_DATABASE_URL")) as server, server.database() as url:
        if sync_off:
            conn = await asyncpg.connect(url)
            await conn.execute(f'ALTER DATABASE "{await conn.fetchval("SELECT current_database()")}"'
                               " SET synchronous_commit = off")  # fmt: skip
            await conn.close()
        settings = Settings(database_url=url, eager_start=workload == "W3")
        async with Engine.open(settings) as engine:
            segments = await {"W2": w2, "A1": a1, "W3": w3}[workload](engine, n)
    report([s for s in segments if any(m[0] == "ckpt<" for m in s)] if workload != "W2" else segments,
           by_position=workload != "W2")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", choices=("W2", "A1", "W3"), default="W2")
    parser.add_argument(
        "--runs", type=int, default=None, help="W2: runs of 1,000 steps (5); A1, W3: runs (150)"
    )
    parser.add_argument("--sync-commit-off", action="store_true")
    args = parser.parse_args()
    runs_wanted = args.runs or (5 if args.workload == "W2" else 150)
    uvloop.run(main(args.workload, runs_wanted, args.sync_commit_off))
