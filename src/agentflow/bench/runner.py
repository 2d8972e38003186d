"""Run the selected workloads on a fresh database and collect the report."""

from __future__ import annotations

import datetime as dt
import os
import platform
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import psutil

import agentflow
from agentflow.bench import (
    agent_steps,
    dispatch,
    event_latency,
    graphs,
    ingest,
    latency,
    model_nodes,
    queries,
    retention,
    searches,
    sleep,
    throughput,
)
from agentflow.bench.context import FULL, QUICK, BenchContext
from agentflow.bench.database import bench_server
from agentflow.bench.floor import Floor, measure_floor
from agentflow.bench.report import Metric, Report, WorkloadResult
from agentflow.core.frozen import frozen
from agentflow.engine import Engine
from agentflow.settings import Settings

Workload = Callable[[BenchContext], Awaitable[WorkloadResult]]

WORKLOADS: dict[str, Workload] = {
    "W1": throughput.w1,
    "W2": latency.w2,
    "W3": latency.w3,
    "W4": sleep.w4,
    "W4-10k": sleep.w4_10k,
    "G1": graphs.g1,
    "W5": graphs.w5,
    "E1": ingest.e1,
    "E2": event_latency.e2,
    "E3": dispatch.e3,
    "A1": agent_steps.a1,
    "L1": model_nodes.l1,
    "P1": retention.p1,
    "S1": searches.s1,
}
QUICK_SKIPS = frozenset({"W4-10k"})
# One run at a time, step after step: each gets, beside the floor, the commit paced by the CPU
# nearest its steps' own (about 0.1 ms a trivial step, 0.3 ms a model node's; floor.py).
STEP_BY_STEP = {"W2": 100, "G1": 100, "L1": 300, "A1": 300}


@frozen
class BenchOptions:
    """What ``agentflow bench`` was asked to do.

    Attributes:
        workloads: keys of ``WORKLOADS``, in order.
        quick: small sizes (the CI smoke test).
        runs: overrides the run count of W1 and W4.
        workers: worker processes for W1 and the W4 workloads.
        concurrency: ``--concurrency`` of each worker process.
        server_url: a server to create the benchmark database on (None: embedded).
    """

    workloads: tuple[str, ...]
    quick: bool = False
    runs: int | None = None
    workers: int = 2
    concurrency: int = 32
    server_url: str | None = None


def selected(requested: list[str] | None, quick: bool) -> tuple[str, ...]:
    """The workload keys to run: all by default (without W4-10k when quick).

    Raises:
        ValueError: an unknown key.
    """
    if not requested:
        return tuple(k for k in WORKLOADS if not (quick and k in QUICK_SKIPS))
    keys: list[str] = []
    for item in requested:
        for key in (k.strip().upper().replace("-10K", "-10k") for k in item.split(",")):
            if key not in WORKLOADS:
                raise ValueError(f"unknown workload {key!r}; choose from {', '.join(WORKLOADS)}")
            if key not in keys:
                keys.append(key)
    return tuple(keys)


async def run_bench(options: BenchOptions, progress: Callable[[str], None]) -> Report:
    """Run the workloads, each on a new database; a workload that fails is reported with
    its error, not raised."""
    sizes = QUICK if options.quick else FULL
    if options.runs is not None:
        sizes = replace(sizes, w1_runs=options.runs, w4_runs=options.runs)
    progress("starting a fresh database server" if options.server_url is None else "connecting")
    async with bench_server(options.server_url) as server:
        async with server.database() as url, _engine(url) as engine:
            progress(f"measuring the floor ({sizes.floor} commits)")
            floor = await measure_floor(url, sizes.floor)
            machine = await _machine(engine, server.kind)
        report = Report(
            machine=machine,
            floor=floor.to_json(),
            settings={
                "workloads": list(options.workloads),
                "quick": options.quick,
                "workers": options.workers,
                "concurrency_per_worker": options.concurrency,
                "sizes": asdict(sizes),
                "worker_settings": _worker_settings(),
            },
        )
        for key in options.workloads:
            async with server.database() as url, _engine(url) as engine:
                # The commit cost drifts over minutes on a shared machine: each workload's
                # ratios use a floor measured on its own database just before it runs.
                local = await measure_floor(url, max(sizes.floor // 4, 100))
                ctx = BenchContext(engine, url, local, sizes, options.workers, options.concurrency, progress)
                try:
                    result = await WORKLOADS[key](ctx)
                    result.metrics.insert(
                        0, Metric("floor: INSERT+COMMIT p50, just before", local.commit.p50, "ms")
                    )
                    if key in STEP_BY_STEP:
                        result.metrics.insert(1, _paced_floor(local, STEP_BY_STEP[key]))
                    result.details["floor"] = local.to_json()
                    report.workloads.append(result)
                except Exception as exc:
                    progress(f"{key} failed: {traceback.format_exc(limit=4)}")
                    report.workloads.append(
                        WorkloadResult(key, "(failed)", error=f"{type(exc).__name__}: {exc}")
                    )
        async with server.database() as url:
            again = await measure_floor(url, sizes.floor)
        report.floor["commit_p50_ms_at_end"] = again.commit.p50
        report.machine["load_average_end"] = list(os.getloadavg())
        report.machine["cpu_pressure_end"] = _cpu_pressure()
    return report


@asynccontextmanager
async def _engine(url: str) -> AsyncIterator[Engine]:
    async with Engine.open(Settings(database_url=url), migrate_schema=False) as engine:
        yield engine


def _paced_floor(floor: Floor, cpu_us: int) -> Metric:
    """The floor's commit after ``cpu_us`` µs of CPU, as a workload's informative line."""
    return Metric(
        f"floor: INSERT+COMMIT p50 after {cpu_us} µs of CPU, just before",
        floor.paced_p50(cpu_us),
        "ms",
        floor_ratio=floor.paced_p50(cpu_us) / floor.commit.p50,
    )


async def _machine(engine: Engine, kind: str) -> dict[str, Any]:
    facts = await queries.server_facts(engine.db.pool)
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "agentflow": agentflow.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average_start": list(os.getloadavg()),
        "cpu_pressure_start": _cpu_pressure(),
        "database": kind,
        "postgres": facts,
    }


def _cpu_pressure() -> str | None:
    """Linux pressure stall information for the CPU (share of time tasks waited for a CPU):
    high values mean other processes competed with the benchmark."""
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None


def _worker_settings() -> dict[str, Any]:
    """The engine settings worker processes run with (from the environment)."""
    settings = Settings()
    return {
        name: getattr(settings, name)
        for name in ("lease_ttl", "poll_interval", "pool_min_size", "pool_max_size", "statement_timeout")
    }
