"""The machinery of the R2 fault tests: a crash-prone cluster, ``agentflow serve``, producers.

``ingest_under_restarts`` runs one chaos session on its own PostgreSQL cluster and returns
what it saw; ``reconcile_session`` turns that into the JSON verdict, from independent queries
(``tests.fault.checks.reconcile_ingest``) plus what the session observed on the way.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.connecting import upgrade_schema
from agentflow.engine import Engine
from agentflow.settings import Settings
from tests.fault.checks import all_settled, reconcile_ingest
from tests.support.pg_cluster import PostgresCluster
from tests.support.processes import REPO, worker_env
from tests.support.serve_process import ServeProcess

TOPIC = "r2.ingest"
NAIVE_TOPIC = "r2.naive"
KEYS = 200
TERMINAL_BOUND = 60.0  # the guarantee: every run terminal within 60 s after the last restart


def r2_flow(name: str, topic: str) -> dict[str, Any]:
    """A structured workflow started by ``topic``, one active run per account: a short nap, then done."""
    return {
        "name": name,
        "kind": "structured",
        "trigger": {"topics": [topic], "enrollment": {"key": "{{ event.data.account_id }}"}},
        "nodes": [
            {"id": "nap", "type": "wait", "duration": "0.3s"},
            {"id": "done", "type": "finish", "output": {"account": "{{ payload.account_id }}"}},
        ],
    }


@dataclass
class Plan:
    """What one chaos session does.

    Attributes:
        producers: producer processes posting to ``TOPIC``, each with its own ids.
        events_per_producer: distinct events each posts (about 20% are posted twice).
        rate: posts per second per producer.
        min_restarts: the crashes the session must have made during the ingest.
        naive_events: events of the naive producer (on ``NAIVE_TOPIC``); 0 for none.
        with_worker: serve with its worker (dispatcher, runs); False serves the API only.
        serve_url_params: session settings in serve's database URL.
        cluster_settings: server settings of the cluster.
    """

    producers: int
    events_per_producer: int
    rate: float
    min_restarts: int
    naive_events: int = 0
    with_worker: bool = True
    serve_url_params: Mapping[str, str] = field(default_factory=dict)
    cluster_settings: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Session:
    """What one chaos session saw."""

    plan: Plan
    seed: int
    workflow_id: UUID
    results: list[dict[str, Any]] = field(default_factory=list)
    naive: list[dict[str, Any]] = field(default_factory=list)
    restarts: list[dict[str, float]] = field(default_factory=list)
    shared_key_samples: int = 0
    monitor_polls: int = 0
    terminal_after_last_restart_s: float | None = None
    serve_exit: int | None = None
    serve_error_logs: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0


async def _monitor(url: str, session: Session, stop: asyncio.Event) -> None:
    """Sample the runs table: keys held by two active runs at once (G3), through outages."""
    conn: asyncpg.Connection | None = None
    while not stop.is_set():
        try:
            if conn is None or conn.is_closed():
                conn = await asyncpg.connect(url, timeout=2)
            shared = await conn.fetchval(
                "SELECT count(*) FROM (SELECT 1 FROM runs WHERE active AND enrollment_key IS NOT NULL"
                " GROUP BY workflow_id, enrollment_key HAVING count(*) > 1) k"
            )
            session.shared_key_samples += int(shared)
            session.monitor_polls += 1
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
            if conn is not None:
                conn.terminate()
            conn = None  # the server is down or restarting: sample again once it is back
        await asyncio.sleep(0.2)
    if conn is not None:
        await conn.close()


async def _restarter(
    cluster: PostgresCluster, rng: random.Random, ingesting: asyncio.Event, session: Session, origin: float
) -> None:
    """Crash the server every 3-6 s (down 0.5-2 s) while the producers still post."""
    while True:
        await asyncio.sleep(rng.uniform(3.0, 6.0))
        if not ingesting.is_set():
            return
        down = rng.uniform(0.5, 2.0)
        crashed = time.monotonic()
        await asyncio.to_thread(cluster.crash)
        await asyncio.sleep(down)
        await asyncio.to_thread(cluster.start)
        up = time.monotonic()
        session.restarts.append(
            {"at_s": round(crashed - origin, 2), "down_s": round(up - crashed, 2), "up_mono": up}
        )


def _start_producer(spec: dict[str, Any], out: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-m", "tests.support.producer", json.dumps(spec), str(out)]
    return subprocess.Popen(args, cwd=REPO, env=env, stderr=out.with_suffix(".err").open("wb"))


async def ingest_under_restarts(plan: Plan, log_dir: Path, seed: int) -> tuple[Session, PostgresCluster]:
    """One session: its own cluster, serve, producers and crashes; returns once all is settled.

    The caller removes the returned cluster after reconciling.
    """
    rng = random.Random(seed)
    cluster = PostgresCluster(plan.cluster_settings)
    try:
        cluster.start()
        admin = await asyncpg.connect(cluster.url())
        await admin.execute("CREATE DATABASE agentflow")
        await admin.close()
        url = cluster.url("agentflow")
        await upgrade_schema(url)
        engine = await Engine.connect(
            Settings(database_url=url, pool_min_size=1, pool_max_size=2), migrate_schema=False
        )
        try:
            published = await engine.publish_workflow(r2_flow("r2", TOPIC))
        finally:
            await engine.close()
        session = Session(plan, seed, published.workflow.id)
        await _chaos(plan, cluster, url, log_dir, rng, session)
    except BaseException:
        print(f"server log:\n{cluster.tail_log()}")
        cluster.remove()
        raise
    return session, cluster


async def _chaos(
    plan: Plan, cluster: PostgresCluster, url: str, log_dir: Path, rng: random.Random, session: Session
) -> None:
    env = worker_env(
        cluster.url("agentflow", **plan.serve_url_params),
        lease_ttl=3,
        poll_interval=0.2,
        pool_max_size=10,
        measured=True,  # correctness, not timing, is judged here: let coverage see the outage paths
    )
    serve = ServeProcess(env, log_dir, concurrency=32, worker=plan.with_worker)
    procs: list[tuple[subprocess.Popen[bytes], Path, bool]] = []
    stop = asyncio.Event()
    ingesting = asyncio.Event()
    origin = time.monotonic()
    try:
        await asyncio.to_thread(serve.wait_ready)
        specs = [
            ({"url": serve.url, "topic": TOPIC, "prefix": f"p{i}", "count": plan.events_per_producer,
              "keys": KEYS, "repost": 0.2, "rate": plan.rate, "seed": rng.randrange(2**32)}, False)
            for i in range(plan.producers)
        ]  # fmt: skip
        if plan.naive_events:
            specs.append(
                ({"url": serve.url, "topic": NAIVE_TOPIC, "prefix": "naive", "count": plan.naive_events,
                  "keys": KEYS, "repost": 0.0, "rate": plan.rate, "seed": rng.randrange(2**32),
                  "naive": True}, True)
            )  # fmt: skip
        for spec, naive in specs:
            out = log_dir / f"{spec['prefix']}.json"
            procs.append((_start_producer(spec, out), out, naive))
        ingesting.set()
        monitor = asyncio.create_task(_monitor(url, session, stop))
        restarter = asyncio.create_task(_restarter(cluster, rng, ingesting, session, origin))
        while any(p.poll() is None for p, _out, _naive in procs):
            await asyncio.sleep(0.1)
            if restarter.done():
                restarter.result()  # a failed restart fails the test here
        ingesting.clear()
        await restarter
        for proc, out, naive in procs:
            assert proc.returncode == 0, out.with_suffix(".err").read_text()[-3000:]
            (session.naive if naive else session.results).append(json.loads(out.read_text()))
        if plan.with_worker:
            await _settle(url, session)
        stop.set()
        await monitor
    finally:
        stop.set()
        ingesting.clear()
        for proc, _out, _naive in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        session.serve_exit = serve.stop()
        session.serve_error_logs = serve.error_logs()
        for excerpt in serve.error_excerpts():
            print(f"serve logged: {excerpt}")
        session.elapsed_s = round(time.monotonic() - origin, 1)


async def _settle(url: str, session: Session) -> None:
    """Wait (up to the bound and a little more) until every run is terminal; record when."""
    last_up = session.restarts[-1]["up_mono"] if session.restarts else time.monotonic()
    pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
    try:
        while time.monotonic() - last_up < TERMINAL_BOUND + 10:
            if await all_settled(pool, session.workflow_id, TOPIC):
                session.terminal_after_last_restart_s = round(time.monotonic() - last_up, 2)
                return
            await asyncio.sleep(0.2)
    finally:
        await pool.close()


async def reconcile_session(session: Session, cluster: PostgresCluster) -> dict[str, Any]:
    """The verdict of a session, from an independent query on its cluster."""
    pool = await asyncpg.create_pool(cluster.url("agentflow"), min_size=1, max_size=2)
    try:
        dispatched = session.workflow_id if session.plan.with_worker else None
        verdict = await reconcile_ingest(pool, session.results, topic=TOPIC, workflow_id=dispatched)
        if session.naive:
            naive = await reconcile_ingest(pool, session.naive, topic=NAIVE_TOPIC)
            verdict["naive_producer_control"] = {"events": naive["events"], "lost": naive["lost"]}
    finally:
        await pool.close()
    logged = session.serve_error_logs
    verdict["unexpected"].update(
        active_runs_sharing_a_key_while_running=session.shared_key_samples,
        serve_exit_code=session.serve_exit,
        serve_error_logs=dict(logged),
    )
    bound = session.terminal_after_last_restart_s
    if session.plan.with_worker:
        verdict["lost"]["not_terminal_within_bound"] = int(bound is None or bound > TERMINAL_BOUND)
    verdict.update(
        seed=session.seed,
        restarts=[{k: v for k, v in r.items() if k != "up_mono"} for r in session.restarts],
        terminal_after_last_restart_s=bound,
        monitor_polls=session.monitor_polls,
        elapsed_s=session.elapsed_s,
    )
    return verdict
