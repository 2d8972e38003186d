"""What every workload receives: the engine, the floor, sizes and worker settings."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

from agentflow.bench.floor import Floor
from agentflow.bench.tools import NOOP
from agentflow.core.frozen import frozen
from agentflow.engine import Engine


@frozen
class Sizes:
    """How big each workload is (``FULL`` by default, ``QUICK`` for ``--quick``)."""

    floor: int
    w1_runs: int
    w2_steps: int
    w2_runs: int
    w3_starts: int
    w4_runs: int
    w4_sleep: float
    w4_10k_runs: int
    w4_10k_sleep: tuple[float, float]
    e1_events: int  # single-event publishes per path (HTTP, Python API)
    e1_batches: int  # batches of 500 per path
    e2_publishes: int
    e3_events: int
    e3_workflows: int
    a1_runs: int  # agent runs per phase (all at once, then one at a time)
    p1_runs: int  # finished runs kept in P1's larger history (10 steps each)
    p1_old: int  # old finished runs each P1 pass prunes
    s1_runs: int  # runs S1 searches


FULL = Sizes(
    floor=2000, w1_runs=2000, w2_steps=1000, w2_runs=1, w3_starts=200, w4_runs=1000, w4_sleep=2.0,
    w4_10k_runs=10_000, w4_10k_sleep=(10.0, 60.0),
    e1_events=2000, e1_batches=20, e2_publishes=200, e3_events=1000, e3_workflows=100, a1_runs=200,
    p1_runs=1_000_000, p1_old=5000, s1_runs=1_000_000,
)  # fmt: skip
QUICK = Sizes(
    floor=300, w1_runs=200, w2_steps=100, w2_runs=1, w3_starts=30, w4_runs=100, w4_sleep=2.0,
    w4_10k_runs=500, w4_10k_sleep=(2.0, 4.0),
    e1_events=200, e1_batches=4, e2_publishes=30, e3_events=100, e3_workflows=100, a1_runs=20,
    p1_runs=20_000, p1_old=500, s1_runs=20_000,
)  # fmt: skip


@frozen
class BenchContext:
    """The shared inputs of the workloads.

    Attributes:
        engine: the engine on the benchmark database (publishes, starts, reads).
        url: the workload's own database, for worker processes.
        floor: the commit floor measured on it.
        sizes: the workload sizes.
        workers: worker processes for the throughput and sleep workloads.
        concurrency: ``--concurrency`` of each worker process.
        progress: prints a progress line.
    """

    engine: Engine
    url: str
    floor: Floor
    sizes: Sizes
    workers: int
    concurrency: int
    progress: Callable[[str], None]


def chain(name: str, steps: int) -> dict[str, Any]:
    """A structured workflow of ``steps`` trivial tool steps in a row."""
    nodes = [{"id": f"s{i}", "type": "tool", "tool": NOOP} for i in range(steps)]
    return {"name": name, "kind": "structured", "nodes": nodes}


def sleeper(name: str, wait: dict[str, Any]) -> dict[str, Any]:
    """A wait node (``duration`` or ``until``) followed by one trivial step."""
    nodes = [{"id": "nap", "type": "wait", **wait}, {"id": "after", "type": "tool", "tool": NOOP}]
    return {"name": name, "kind": "structured", "nodes": nodes}


def triggered(name: str, trigger: dict[str, Any]) -> dict[str, Any]:
    """One trivial step, started by events (``trigger``: topics, conditions, ...)."""
    return {**chain(name, 1), "trigger": trigger}


async def publish(engine: Engine, config: dict[str, Any]) -> UUID:
    """Publish ``config``; return the workflow id."""
    published = await engine.publish_workflow(config)
    return published.workflow.id


async def start_many(
    engine: Engine,
    workflow_id: UUID,
    count: int,
    *,
    parallel: int = 16,
    payload: Callable[[int], Any] | None = None,
) -> float:
    """Start ``count`` runs through ``Engine.start_run`` from ``parallel`` tasks; return
    the seconds it took."""
    numbers = iter(range(count))

    async def starter() -> None:
        for i in numbers:  # one shared iterator: each number is taken once
            await engine.start_run(workflow_id, None if payload is None else payload(i))

    began = time.perf_counter()
    await asyncio.gather(*(starter() for _ in range(parallel)))
    return time.perf_counter() - began
