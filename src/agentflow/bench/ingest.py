"""E1, ingest: events per second into the log, over HTTP and through the Python API.

Four phases, each publishing new events (explicit message ids) on its own topic: one event
per ``POST /api/events`` and 500 per request, to an ``agentflow serve --no-worker``
subprocess on the workload's database; then one event per ``engine.events.publish`` call
and 500 per call, on the benchmark's own engine. The server runs no worker, hence no
dispatcher (E3 measures dispatching apart, and nothing listens to these topics): the phases
measure the write path alone. A phase's rate is its events over the client-clock time from
its first request to its last answer; the HTTP client (one ``httpx.AsyncClient``) runs in
the benchmark process, on the same CPUs as the server. Afterwards the log is counted by
topic: every published event must be stored, once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, replace
from typing import Any

import httpx

from agentflow.bench import queries
from agentflow.bench.context import BenchContext
from agentflow.bench.report import WorkloadResult
from agentflow.bench.server import api_server
from agentflow.bench.stats import Summary
from agentflow.core.frozen import frozen
from agentflow.engine import Engine

BATCH = 500
SINGLE_IN_FLIGHT = 16  # requests (or calls) at once for single events, as W1's starters
BATCH_IN_FLIGHT = 2  # for batches: one statement of 500 rows keeps a core busy already
WARMUP = 32  # single events per path first: connections, prepared statements, imports

Sender = Callable[[list[dict[str, Any]]], Awaitable[int]]
"""Publishes a list of events; returns how many were new."""


@frozen
class Phase:
    """One phase's outcome.

    Attributes:
        topic: the phase's topic.
        requests: requests (or calls) made.
        events: events sent.
        created: events the answers said were new.
        seconds: from the first request to the last answer (client clock).
        request_ms: each request's time (client clock, with others in flight).
        in_flight: requests at once.
        client_cpu_s: CPU time the benchmark process used meanwhile (client, or engine).
        server_cpu_s: CPU time the server process used meanwhile (HTTP phases).
    """

    topic: str
    requests: int
    events: int
    created: int
    seconds: float
    request_ms: Summary
    in_flight: int
    client_cpu_s: float
    server_cpu_s: float | None = None

    @property
    def events_per_s(self) -> float:
        """Events stored per second."""
        return self.events / self.seconds


async def e1(ctx: BenchContext) -> WorkloadResult:
    """Events/s of single publishes and of batches of 500, over HTTP and ``engine.events``."""
    singles, batches = ctx.sizes.e1_events, ctx.sizes.e1_batches
    result = WorkloadResult(
        "E1",
        f"ingest: {singles} single events and {batches} batches of {BATCH}, over HTTP and Python",
    )
    phases: dict[str, Phase] = {}
    ctx.progress(f"E1: agentflow serve (--no-worker); {singles} single POSTs, {batches} batches of {BATCH}")
    async with (
        api_server(ctx.url) as server,
        httpx.AsyncClient(base_url=server.base_url, timeout=120) as client,
    ):
        http = _http_sender(client)
        await _phase(http, "bench.e1.warmup.http", WARMUP, 1, SINGLE_IN_FLIGHT)
        for key, topic, count, size, in_flight in (
            ("http_single", "bench.e1.http.single", singles, 1, SINGLE_IN_FLIGHT),
            ("http_batch", "bench.e1.http.batch", batches, BATCH, BATCH_IN_FLIGHT),
        ):
            # The server's CPU time says how much of the figure is the server's and how much
            # the client's, which shares the machine's CPUs with it.
            cpu = server.cpu_seconds()
            phase = await _phase(http, topic, count, size, in_flight)
            phases[key] = replace(phase, server_cpu_s=server.cpu_seconds() - cpu)
        server.check_alive()
    ctx.progress(f"E1: engine.events.publish, {singles} single calls, {batches} batches of {BATCH}")
    python = _python_sender(ctx.engine)
    await _phase(python, "bench.e1.warmup.python", WARMUP, 1, SINGLE_IN_FLIGHT)
    phases["python_single"] = await _phase(python, "bench.e1.python.single", singles, 1, SINGLE_IN_FLIGHT)
    phases["python_batch"] = await _phase(python, "bench.e1.python.batch", batches, BATCH, BATCH_IN_FLIGHT)

    stored = await queries.events_by_topic(ctx.engine.db.pool)
    commits = ctx.floor.commits_per_s
    for key, label in (
        ("http_single", f"events/s, HTTP, 1 per POST ({SINGLE_IN_FLIGHT} in flight)"),
        ("http_batch", f"events/s, HTTP, {BATCH} per POST ({BATCH_IN_FLIGHT} in flight)"),
        ("python_single", f"events/s, engine.events.publish, 1 per call ({SINGLE_IN_FLIGHT} tasks)"),
        ("python_batch", f"events/s, engine.events.publish, {BATCH} per call ({BATCH_IN_FLIGHT} tasks)"),
    ):
        result.add(label, phases[key].events_per_s, "events/s", floor=commits)
    result.details = {
        "server": "`agentflow serve --no-worker` subprocess: HTTP only, no worker, no dispatcher",
        "client": "one httpx.AsyncClient in the benchmark process (same machine)",
        "phases": {
            key: {
                **asdict(phase),
                "events_per_s": phase.events_per_s,
                "stored": stored.get(phase.topic, 0),
                "client_cpu_ms_per_request": 1000 * phase.client_cpu_s / phase.requests,
                "server_cpu_ms_per_request": (
                    None if phase.server_cpu_s is None else 1000 * phase.server_cpu_s / phase.requests
                ),
            }
            for key, phase in phases.items()
        },
        "all_stored": all(stored.get(p.topic, 0) == p.events == p.created for p in phases.values()),
    }
    return result


async def _phase(send: Sender, topic: str, requests: int, size: int, in_flight: int) -> Phase:
    """Send ``requests`` requests of ``size`` new events from ``in_flight`` tasks."""
    bodies = [[_event(topic, r * size + i) for i in range(size)] for r in range(requests)]
    pending = iter(bodies)  # one shared iterator: each body is sent once
    created = 0
    latencies: list[float] = []

    async def client() -> None:
        nonlocal created
        for body in pending:
            began = time.perf_counter()
            new = await send(body)
            created += new  # not ``created += await ...``: that reads ``created`` before awaiting
            latencies.append(time.perf_counter() - began)

    cpu = time.process_time()
    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(in_flight)))
    seconds = time.perf_counter() - began
    cpu = time.process_time() - cpu
    summary = Summary.of(latencies).scaled(1000)
    return Phase(topic, requests, requests * size, created, seconds, summary, in_flight, cpu)


def _event(topic: str, n: int) -> dict[str, Any]:
    # An account id, as most real events carry one (it feeds the account index too).
    return {
        "topic": topic,
        "message_id": f"{topic}-{n}",
        "data": {"account_id": f"acct-{n % 100}", "n": n, "subject": "benchmark"},
    }


def _http_sender(client: httpx.AsyncClient) -> Sender:
    async def send(events: list[dict[str, Any]]) -> int:
        body = events[0] if len(events) == 1 else {"events": events}
        response = await client.post("/api/events", json=body)
        response.raise_for_status()
        created: int = response.json()["created"]
        return created

    return send


def _python_sender(engine: Engine) -> Sender:
    async def send(events: list[dict[str, Any]]) -> int:
        return sum(p.created for p in await engine.events.publish(events))

    return send
