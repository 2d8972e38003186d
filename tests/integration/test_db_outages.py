"""Database outages: LISTEN connections come back, loops wait them out, the API answers 503.

The LISTEN tests give the consumer and the worker a poll interval of an hour, so only a
NOTIFY can wake them within the test: a LISTEN connection that did not come back after
being cut (or after the server restarted) leaves them asleep and the test fails. The
restart tests crash a cluster of their own (``pg_ctl -m immediate``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import httpx
import pytest
from starlette.types import Receive, Scope, Send

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.api.app import create_app
from agentflow.api.guards import CatchAll
from agentflow.connecting import upgrade_schema
from agentflow.core.events import Event
from agentflow.engine import Engine
from agentflow.runtime.metrics import REGISTRY
from agentflow.store import events, runs
from agentflow.store.database import WAKE_CHANNEL, Connection, unavailable
from tests.conftest import make_settings
from tests.support.http_server import error_code, serve
from tests.support.pg_cluster import PostgresCluster

HOUR = 3600.0


def rescues() -> float:
    """Runs this process's workers claimed after their lease expired."""
    return REGISTRY.get_sample_value("agentflow_rescues_total") or 0.0


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 15.0) -> None:
    """Poll ``check`` until it holds; fail with ``what`` after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.05)


async def listening_pids(pool: asyncpg.Pool, channel: str) -> list[int]:
    """Backends of this database whose last statement was ``LISTEN channel``."""
    rows = await pool.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = $1",
        f'LISTEN "{channel}"',
    )
    return [r["pid"] for r in rows]


async def cut_listener(pool: asyncpg.Pool, channel: str) -> int:
    """Terminate the one backend listening on ``channel``; wait until another one listens."""
    await eventually(lambda: _count_is(pool, channel, 1), f"one LISTEN on {channel}")
    (pid,) = await listening_pids(pool, channel)
    assert await pool.fetchval("SELECT pg_terminate_backend($1)", pid)

    async def replaced() -> bool:
        pids = await listening_pids(pool, channel)
        return len(pids) == 1 and pids[0] != pid

    await eventually(replaced, f"a new LISTEN on {channel} after the old one was terminated")
    return pid


async def _count_is(pool: asyncpg.Pool, channel: str, n: int) -> bool:
    return len(await listening_pids(pool, channel)) == n


async def _both_listening(pool: asyncpg.Pool) -> bool:
    """The worker's and its dispatcher's LISTEN connections are both open (once each)."""
    return await _count_is(pool, WAKE_CHANNEL, 1) and await _count_is(pool, events.EVENTS_CHANNEL, 1)


async def test_a_listener_reconnects_wakes_its_owner_and_receives_notifies_again(engine: Engine) -> None:
    heard: list[str] = []
    listener = await engine.db.listen(heard.append, "outage_test")
    try:
        assert listener.listening
        await cut_listener(engine.db.pool, "outage_test")
        # NOTIFYs sent while it was away are lost, so it wakes its owner once it is back.
        await eventually(lambda: _true("" in heard), "the wake-up after reconnecting")
        await engine.db.pool.execute("SELECT pg_notify('outage_test', 'after')")
        await eventually(lambda: _true("after" in heard), "a NOTIFY after reconnecting")
        assert listener.reconnects == 1
    finally:
        await listener.close()
    assert not listener.listening


async def _true(value: bool) -> bool:
    return value


async def test_the_event_consumer_listens_again_after_its_connection_is_cut(engine: Engine) -> None:
    seen: list[str] = []

    async def handler(_conn: Connection, batch: list[Event]) -> None:
        seen.extend(e.message_id for e in batch)

    consumer = engine.events.consumer("outage", handler)
    consumer.poll_interval = HOUR
    task = asyncio.create_task(consumer.run())
    try:
        await cut_listener(engine.db.pool, events.EVENTS_CHANNEL)
        await engine.events.publish([{"topic": "outage", "message_id": "after-cut"}])
        await eventually(lambda: _true("after-cut" in seen), "the event published after the cut")
    finally:
        consumer.stop()
        await task


async def test_the_worker_listens_again_after_its_connection_is_cut(engine: Engine) -> None:
    await engine.publish_workflow(
        {"name": "quick", "kind": "structured", "nodes": [{"id": "f", "type": "finish"}]}
    )
    worker = engine.worker(dispatch=False)
    worker.settings = worker.settings.model_copy(update={"poll_interval": HOUR})
    task = asyncio.create_task(worker.run())
    try:
        await cut_listener(engine.db.pool, WAKE_CHANNEL)
        run = await engine.start_run("quick")
        done = await engine.wait_for_run(run.id, timeout=15)
        assert done.status == "completed", "the worker slept through the NOTIFY of a new run"
    finally:
        worker.stop()
        await task


@pytest.fixture
async def crashable() -> AsyncIterator[tuple[PostgresCluster, Engine]]:
    """An engine on a cluster of its own, which the test may crash and start again."""
    cluster = PostgresCluster()
    try:
        cluster.start()
        admin = await asyncpg.connect(cluster.url())
        await admin.execute("CREATE DATABASE agentflow")
        await admin.close()
        await upgrade_schema(cluster.url("agentflow"))
        engine = await Engine.connect(make_settings(cluster.url("agentflow")), migrate_schema=False)
        try:
            yield cluster, engine
        finally:
            await engine.close()
    finally:
        cluster.remove()


async def test_worker_and_dispatcher_survive_a_database_restart_and_are_woken_again(
    crashable: tuple[PostgresCluster, Engine],
) -> None:
    cluster, engine = crashable
    await engine.publish_workflow(
        {"name": "on-ping", "kind": "structured", "trigger": {"topics": ["ping"]},
         "nodes": [{"id": "f", "type": "finish"}]}
    )  # fmt: skip
    engine.settings = engine.settings.model_copy(update={"poll_interval": HOUR})
    worker = engine.worker()
    task = asyncio.create_task(worker.run())
    try:
        await eventually(lambda: _both_listening(engine.db.pool), "LISTEN on both channels")
        cluster.crash()
        await asyncio.sleep(1.0)  # down: the loops meet refused connections, then "starting up"
        cluster.start()
        await eventually(lambda: _both_listening(engine.db.pool), "LISTEN on both channels again")
        await engine.events.publish([{"topic": "ping", "message_id": "after-restart"}])

        async def completed() -> bool:
            return bool(await engine.db.pool.fetchval("SELECT count(*) FROM runs WHERE status = 'completed'"))

        await eventually(completed, "a run started by an event after the restart, completed")
        assert not task.done(), "the worker stopped"
    finally:
        worker.stop()
        await task


async def test_a_run_whose_checkpoint_met_an_outage_is_released_not_rescued(
    crashable: tuple[PostgresCluster, Engine],
) -> None:
    """The worker hands the run back once the database is up again, within its lease.

    Without that, the run would wait for its lease to expire and be rescued, and a few
    database restarts would fail it with ``worker_lost`` as if workers had died.
    """
    cluster, engine = crashable
    await engine.publish_workflow(
        {"name": "slow", "kind": "structured",
         "nodes": [{"id": "s", "type": "tool", "tool": "sleepy", "args": {"seconds": 1.0}},
                   {"id": "f", "type": "finish"}]}
    )  # fmt: skip
    engine.settings = engine.settings.model_copy(update={"lease_ttl": 10.0})
    worker = engine.worker(dispatch=False)
    rescues_before = rescues()
    task = asyncio.create_task(worker.run())
    try:
        run = await engine.start_run("slow")

        async def claimed() -> bool:
            return (await engine.get_run(run.id)).lease_owner == worker.name

        await eventually(claimed, "the worker claimed the run")
        # Down from inside the 1 s step until after its checkpoint was tried.
        await asyncio.to_thread(cluster.crash)
        await asyncio.sleep(1.5)
        await asyncio.to_thread(cluster.start)
        done = await engine.wait_for_run(run.id, timeout=30)
        assert done.status == "completed"
        assert rescues() == rescues_before, "the run was rescued, not released"
    finally:
        worker.stop()
        await task


async def test_a_connection_lost_inside_a_transaction_is_503_not_500(engine: Engine) -> None:
    app = create_app(engine)

    @app.get("/lose-connection")
    async def lose_connection() -> None:
        # The backend dies in the middle of the transaction; asyncpg then reports the closed
        # connection as an InterfaceError when the transaction block ends.
        async with engine.db.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    @app.get("/misuse")
    async def misuse() -> None:
        raise asyncpg.InterfaceError("cannot perform operation: another operation is in progress")

    async with serve(app) as base, httpx.AsyncClient(base_url=base) as client:
        lost = await client.get("/lose-connection")
        assert error_code(lost, 503) == "database_unavailable"
        assert int(lost.headers["retry-after"]) > 0
        # An interface error that is not an outage is a bug: still a 500.
        assert error_code(await client.get("/misuse"), 500) == "internal_error"


async def test_a_backend_terminated_while_its_transaction_is_idle_counts_as_unavailable(
    engine: Engine,
) -> None:
    # Terminated from outside between two statements of a transaction, the backend's last
    # words can reach asyncpg before the connection closes: the next statement then finds the
    # protocol halfway (InternalClientError "cannot switch to state ..."), about 17 times in 20
    # with the commit a millisecond after the terminate (ConnectionDoesNotExistError or
    # InterfaceError otherwise). Each is the same lost connection: a 503 and a retry, never a
    # 500 or a worker loop that stops.
    kinds: set[str] = set()
    async with engine.db.pool.acquire() as admin:
        for attempt in range(60):
            conn = await asyncpg.connect(engine.db.url)
            try:
                transaction = conn.transaction()
                await transaction.start()
                await conn.execute("SELECT 1")
                await admin.execute("SELECT pg_terminate_backend($1)", conn.get_server_pid())
                await asyncio.sleep((0.0005, 0.001, 0.002)[attempt % 3])
                with pytest.raises(
                    (asyncpg.InterfaceError, asyncpg.InternalClientError, asyncpg.PostgresError)
                ) as lost:
                    await transaction.commit()
                kinds.add(type(lost.value).__name__)
                assert unavailable(lost.value), repr(lost.value)
            finally:
                conn.terminate()
            if "InternalClientError" in kinds:
                break
    assert kinds
    # What asyncpg raises for misuse stays a bug.
    assert not unavailable(asyncpg.InternalClientError("got result for unknown protocol state 0"))
    assert unavailable(
        asyncpg.InternalClientError("cannot switch to state 15; another operation (2) is in progress")
    )


async def test_an_outage_reaching_the_catch_all_is_503_with_retry_after() -> None:
    async def down(scope: Scope, receive: Receive, send: Send) -> None:
        raise asyncpg.CannotConnectNowError("the database system is starting up")

    async with serve(CatchAll(down)) as base, httpx.AsyncClient(base_url=base) as client:
        response = await client.get("/anything")
    assert error_code(response, 503) == "database_unavailable"
    assert int(response.headers["retry-after"]) > 0


async def _deadlock(pool: asyncpg.Pool) -> asyncpg.DeadlockDetectedError:
    """A real ``deadlock detected`` from PostgreSQL: two transactions lock two rows crosswise."""
    await pool.execute("CREATE TABLE crosswise (id int PRIMARY KEY); INSERT INTO crosswise VALUES (1), (2)")
    async with pool.acquire() as a, pool.acquire() as b:
        ta, tb = a.transaction(), b.transaction()
        await ta.start()
        await tb.start()
        await a.execute("UPDATE crosswise SET id = id WHERE id = 1")
        await b.execute("UPDATE crosswise SET id = id WHERE id = 2")
        outcomes = await asyncio.gather(
            a.execute("UPDATE crosswise SET id = id WHERE id = 2"),
            b.execute("UPDATE crosswise SET id = id WHERE id = 1"),
            return_exceptions=True,
        )
        await ta.rollback()
        await tb.rollback()
    found = [o for o in outcomes if isinstance(o, asyncpg.DeadlockDetectedError)]
    assert len(found) == 1, outcomes
    return found[0]


async def test_a_checkpoint_a_deadlock_rolled_back_is_released_not_rescued_nor_logged_as_a_bug(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL rolls back one side of a deadlock (a checkpoint meeting an enrollment, say):
    the worker hands the run back at once, as after an outage, and the run completes."""
    await engine.publish_workflow(
        {"name": "two", "kind": "structured",
         "nodes": [{"id": "a", "type": "tool", "tool": "echo", "args": {"value": 1}},
                   {"id": "b", "type": "tool", "tool": "echo", "args": {"value": 2}},
                   {"id": "f", "type": "finish"}]}
    )  # fmt: skip
    deadlock = await _deadlock(engine.db.pool)
    real = runs.checkpoint
    calls = 0

    async def first_one_deadlocks(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise deadlock
        return await real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runs, "checkpoint", first_one_deadlocks)
    rescues_before = rescues()
    worker = engine.worker(dispatch=False)
    task = asyncio.create_task(worker.run())
    try:
        run = await engine.start_run("two")
        done = await engine.wait_for_run(run.id, timeout=30)
    finally:
        worker.stop()
        await task
    assert done.status == "completed"
    # The rolled-back checkpoint was made again (how many are full and how many written ahead
    # of the row depends on timing; the deadlocked one is the first either way), and no step
    # was recorded twice.
    assert calls >= 2, "the rolled-back checkpoint was written again"
    assert [s.seq for s in await engine.list_steps(run.id)] == [0, 1, 2]
    assert rescues() == rescues_before, "the run waited for its lease to expire and was rescued"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
