"""Group commit: statements of several runs share a transaction, and each still stands alone.

Against the engine's real pool: many callers at once are answered from fewer transactions than
statements (one per distinct statement), each with its own row (or none when its own fence
fails); a failing statement fails only its caller; a connection lost mid-group fails every
caller of that transaction and commits none of it. A group keeps its connection between
statements for a moment, never one whose statement failed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any
from uuid import UUID

import asyncpg
import pytest
import uvloop

from agentflow.bench.context import chain
from agentflow.engine import Engine
from agentflow.store import commit_groups
from agentflow.store.commit_groups import CommitGroup
from agentflow.store.database import unavailable
from tests.support.agents import running_worker

BUMP = (
    "UPDATE grouped SET v = v + 1 WHERE tag = $1 AND id = $2 AND 1 / $3::int > 0"
    " RETURNING id, v, txid_current() AS tx"
)
# As BUMP, but with $3 = 0 the statement kills its own connection (PostgreSQL evaluates the
# OR's arms in order: the others never reach it).
BUMP_OR_DIE = (
    "UPDATE grouped SET v = v + 1 WHERE tag = $1 AND id = $2"
    " AND ($3::int = 1 OR pg_terminate_backend(pg_backend_pid()))"
    " RETURNING id, v, txid_current() AS tx"
)


BUMP_BACKEND = (
    "UPDATE grouped SET v = v + 1 WHERE tag = $1 AND id = $2 AND 1 / $3::int > 0"
    " RETURNING id, v, pg_backend_pid() AS pid"
)


async def _table(engine: Engine, count: int) -> list[UUID]:
    pool = engine.db.pool
    await pool.execute("CREATE TABLE grouped (tag text, id uuid PRIMARY KEY, v int NOT NULL DEFAULT 0)")
    ids = [uuid.uuid4() for _ in range(count)]
    await pool.executemany("INSERT INTO grouped (tag, id) VALUES ('t', $1)", [(i,) for i in ids])
    return ids


async def _values(engine: Engine) -> dict[UUID, int]:
    return {r["id"]: r["v"] for r in await engine.db.pool.fetch("SELECT id, v FROM grouped")}


async def test_statements_at_once_share_transactions_and_each_gets_its_row(engine: Engine) -> None:
    ids = await _table(engine, 40)
    group = CommitGroup(engine.db.pool)

    rows = await asyncio.gather(*(group.fetchrow(BUMP, "t", i, 1) for i in ids))

    assert [r["id"] for r in rows if r] == ids
    assert all(r["v"] == 1 for r in rows if r)
    assert len({r["tx"] for r in rows if r}) == 1  # one commit for all forty
    assert set((await _values(engine)).values()) == {1}


async def test_a_failed_fence_answers_none_to_its_caller_only(engine: Engine) -> None:
    ids = await _table(engine, 6)
    group = CommitGroup(engine.db.pool)

    rows = await asyncio.gather(
        *(group.fetchrow(BUMP, "other" if n == 3 else "t", i, 1) for n, i in enumerate(ids))
    )

    assert rows[3] is None
    assert all(
        r is not None and r["id"] == i for n, (r, i) in enumerate(zip(rows, ids, strict=True)) if n != 3
    )
    values = await _values(engine)
    assert values[ids[3]] == 0 and sum(values.values()) == 5


async def test_a_failing_statement_fails_alone_and_the_others_commit(engine: Engine) -> None:
    ids = await _table(engine, 8)
    group = CommitGroup(engine.db.pool)

    results = await asyncio.gather(
        *(group.fetchrow(BUMP, "t", i, 0 if n == 5 else 1) for n, i in enumerate(ids)), return_exceptions=True
    )

    assert isinstance(results[5], asyncpg.DivisionByZeroError)
    assert all(isinstance(r, asyncpg.Record) for n, r in enumerate(results) if n != 5)
    values = await _values(engine)
    assert values[ids[5]] == 0 and sum(values.values()) == 7


async def test_a_statement_without_a_run_id_is_refused_and_the_group_goes_on(engine: Engine) -> None:
    ids = await _table(engine, 2)
    group = CommitGroup(engine.db.pool)

    with pytest.raises(TypeError, match="run's id as its second argument"):
        await asyncio.wait_for(group.fetchrow("SELECT $1::text AS tag", "t"), 5)
    with pytest.raises(TypeError, match="run's id"):
        await asyncio.wait_for(group.fetchrow(BUMP, "t", str(ids[0]), 1), 5)

    rows = await asyncio.wait_for(asyncio.gather(*(group.fetchrow(BUMP, "t", i, 1) for i in ids)), 5)
    assert [r["id"] for r in rows if r] == ids


async def test_two_statements_of_one_run_go_in_order_in_separate_transactions(engine: Engine) -> None:
    ids = await _table(engine, 3)
    group = CommitGroup(engine.db.pool)

    rows = await asyncio.gather(
        group.fetchrow(BUMP, "t", ids[0], 1),
        group.fetchrow(BUMP, "t", ids[1], 1),
        group.fetchrow(BUMP, "t", ids[1], 1),
        group.fetchrow(BUMP, "t", ids[2], 1),
    )

    assert [r["v"] for r in rows if r] == [1, 1, 2, 1]
    assert rows[1] is not None and rows[2] is not None and rows[1]["tx"] != rows[2]["tx"]


async def test_different_statements_of_a_group_go_at_once_each_in_one_transaction(engine: Engine) -> None:
    ids = await _table(engine, 6)
    group = CommitGroup(engine.db.pool)
    read = "SELECT id, v, txid_current() AS tx FROM grouped WHERE tag = $1 AND id = $2"

    rows = await asyncio.gather(
        group.fetchrow(BUMP, "t", ids[0], 1),
        group.fetchrow(read, "t", ids[1]),
        group.fetchrow(BUMP, "t", ids[2], 1),
        group.fetchrow(read, "t", ids[3]),
        group.fetchrow(BUMP, "t", ids[4], 1),
        group.fetchrow(read, "t", ids[5]),
    )

    assert [r["id"] for r in rows if r] == ids
    assert [r["v"] for r in rows if r] == [1, 0, 1, 0, 1, 0]
    bumps, reads = {rows[n]["tx"] for n in (0, 2, 4)}, {rows[n]["tx"] for n in (1, 3, 5)}
    assert len(bumps) == 1 and len(reads) == 1, "each statement's runs share one transaction"
    assert bumps != reads


async def test_a_caller_that_gives_up_before_its_group_leaves_its_statement_unsent(engine: Engine) -> None:
    ids = await _table(engine, 3)
    group = CommitGroup(engine.db.pool)

    first = asyncio.ensure_future(group.fetchrow(BUMP, "t", ids[0], 1))
    dropped = asyncio.ensure_future(group.fetchrow(BUMP, "t", ids[1], 1))
    kept = asyncio.ensure_future(group.fetchrow(BUMP, "t", ids[2], 1))
    await asyncio.sleep(0)  # all three wait for the group, not yet sent
    dropped.cancel()
    await asyncio.gather(first, kept)

    values = await _values(engine)
    assert values == {ids[0]: 1, ids[1]: 0, ids[2]: 1}


async def test_a_connection_lost_mid_group_fails_every_caller_and_commits_nothing(engine: Engine) -> None:
    ids = await _table(engine, 5)
    group = CommitGroup(engine.db.pool)

    results = await asyncio.gather(
        *(group.fetchrow(BUMP_OR_DIE, "t", i, 0 if n == 3 else 1) for n, i in enumerate(ids)),
        return_exceptions=True,
    )

    assert all(isinstance(r, Exception) and unavailable(r) for r in results), results
    # The group's transaction died with its connection: none of it committed, not even the
    # statements pipelined before the one that killed it.
    assert set((await _values(engine)).values()) == {0}


@pytest.mark.parametrize("grouped", [True, False])
async def test_negative_control_without_a_group_every_statement_commits_alone(
    engine: Engine, grouped: bool
) -> None:
    ids = await _table(engine, 20)
    sender = CommitGroup(engine.db.pool) if grouped else engine.db.pool

    rows = await asyncio.gather(*(sender.fetchrow(BUMP, "t", i, 1) for i in ids))

    transactions = len({r["tx"] for r in rows if r})
    assert transactions == (1 if grouped else 20)


async def test_quick_starts_at_once_share_a_commit_and_each_is_its_own_run(engine: Engine) -> None:
    await engine.publish_workflow(
        {"name": "grouped-starts", "kind": "structured", "nodes": [{"id": "a", "type": "finish"}]}
    )
    await engine.start_run("grouped-starts", {"n": -1})  # the long way once: the version is known after

    started = await asyncio.gather(*(engine.start_run("grouped-starts", {"n": n}) for n in range(20)))

    rows = await engine.db.pool.fetch(
        "SELECT id, input, xmin::text AS tx FROM runs WHERE id = ANY($1::uuid[])", [r.id for r in started]
    )
    assert sorted(r["input"]["n"] for r in rows) == list(range(20))
    assert len({r["tx"] for r in rows}) < 20  # several inserted by one transaction


@pytest.mark.parametrize("callers", [1, 5])
async def test_callers_are_answered_before_the_connection_goes_back(engine: Engine, callers: int) -> None:
    # A caller (a run's next step) never waits for the pool's release: the group keeps the
    # connection for its next statement and gives it back once it has been idle for HOLD.
    # Negative control: answered after the release, the connection would be idle again.
    ids = await _table(engine, callers)
    pool = engine.db.pool
    group = CommitGroup(pool)
    idle = pool.get_idle_size()

    async def bump(run: UUID) -> tuple[asyncpg.Record | None, int]:
        row = await group.fetchrow(BUMP, "t", run, 1)
        return row, pool.get_idle_size()  # as the caller goes on

    answers = await asyncio.gather(*(bump(i) for i in ids))

    assert all(row is not None and row["v"] == 1 for row, _idle in answers)
    assert {seen for _row, seen in answers} == {idle - 1}  # still out: kept by the group
    await _until(lambda: pool.get_idle_size() == idle)  # and given back when idle


@pytest.mark.parametrize(("hold", "pause"), [(1.0, 0.0), (0.001, 0.02)])
async def test_statements_one_after_another_reuse_the_groups_connection(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, hold: float, pause: float
) -> None:
    # HOLD made long, so a loaded machine cannot make the statements look idle. Negative
    # control (a pause longer than HOLD between statements): the connection goes back each
    # time and is taken from the pool again.
    monkeypatch.setattr(commit_groups, "HOLD", hold)
    ids = await _table(engine, 1)
    pool = _CountingPool(engine.db.pool)
    group = CommitGroup(pool)  # type: ignore[arg-type]
    for _ in range(5):  # a run's steps: each statement sent after the last one's answer
        assert await group.fetchrow(BUMP, "t", ids[0], 1) is not None
        await asyncio.sleep(pause)

    assert (pool.acquired, pool.released) == ((1, 0) if not pause else (5, 5))
    group.give_back()
    await _until(lambda: pool.released == pool.acquired)
    assert (await _values(engine))[ids[0]] == 5


async def test_a_kept_connection_the_server_closed_is_not_used(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commit_groups, "HOLD", 5.0)  # still kept when the server drops it
    ids = await _table(engine, 1)
    pool = engine.db.pool
    group = CommitGroup(pool)
    first = await group.fetchrow(BUMP_BACKEND, "t", ids[0], 1)
    assert first is not None
    await pool.execute("SELECT pg_terminate_backend($1)", first["pid"])  # the server drops it
    await _until(lambda: _closed(group._kept[0]))

    again = await group.fetchrow(BUMP_BACKEND, "t", ids[0], 1)  # on a new connection, no error

    assert again is not None and again["pid"] != first["pid"]
    assert (await _values(engine))[ids[0]] == 2
    group.give_back()


async def test_a_connection_lost_by_its_statement_is_not_kept(engine: Engine) -> None:
    ids = await _table(engine, 1)
    group = CommitGroup(engine.db.pool)
    first = await group.fetchrow(BUMP_BACKEND, "t", ids[0], 1)
    assert first is not None

    with pytest.raises(asyncpg.PostgresConnectionError) as lost:  # it ends its own connection
        await group.fetchrow(BUMP_OR_DIE, "t", ids[0], 0)
    assert unavailable(lost.value)  # its caller hands the run back, as after an outage
    assert group._kept == []
    again = await group.fetchrow(BUMP_BACKEND, "t", ids[0], 1)

    assert again is not None and again["pid"] != first["pid"]
    assert (await _values(engine))[ids[0]] == 2
    group.give_back()


async def test_a_failed_statement_gives_its_connection_back_at_once(engine: Engine) -> None:
    ids = await _table(engine, 1)
    pool = engine.db.pool
    group = CommitGroup(pool)
    idle = pool.get_idle_size()

    with pytest.raises(asyncpg.DivisionByZeroError):
        await group.fetchrow(BUMP, "t", ids[0], 0)

    assert pool.get_idle_size() == idle  # not kept: only a statement that succeeded is


def _closed(conn: Any) -> bool:
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:  # asyncpg gave it back to the pool when it closed
        return True


class _CountingPool:
    """The pool, counting the connections taken from it and given back."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool, self.acquired, self.released = pool, 0, 0

    def get_max_size(self) -> int:
        return self.pool.get_max_size()

    def acquire(self) -> Any:
        self.acquired += 1
        return self.pool.acquire()

    async def release(self, conn: Any) -> None:
        self.released += 1
        await self.pool.release(conn)


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "not within the time allowed"
        await asyncio.sleep(0.005)


async def test_a_small_pool_keeps_nothing_for_the_group(engine: Engine) -> None:
    ids = await _table(engine, 1)
    small = await asyncpg.create_pool(engine.db.url, min_size=1, max_size=3)
    try:
        for pool, kept in ((small, 0), (engine.db.pool, 1)):  # control: the engine's pool of 20
            group = CommitGroup(pool)
            assert await group.fetchrow(BUMP, "t", ids[0], 1) is not None
            assert len(group._kept) == kept
            group.give_back()
    finally:
        await small.close()


async def test_an_idle_group_on_uvloop_gives_its_connection_back_without_spinning(database_url: str) -> None:
    # uvloop's clock counts whole milliseconds. The expiry used to look again after the rest
    # of HOLD however small: a rest under a millisecond made its timer fire on every turn of
    # the loop, the clock unchanged, until the next tick (hundreds of calls each time).
    async def idle_stretches() -> list[int]:
        pool = await asyncpg.create_pool(database_url, min_size=1, max_size=8)
        group = CommitGroup(pool)
        expiries = 0
        expire = group._expire

        def counted() -> None:
            nonlocal expiries
            expiries += 1
            expire()

        group._expire = counted  # type: ignore[method-assign]
        per_stretch: list[int] = []
        try:
            for _ in range(12):
                expiries = 0
                for _ in range(3):  # used again within HOLD: the expiry looks again
                    assert (
                        await group.fetchrow("SELECT $1::text AS tag, $2::uuid AS id", "t", uuid.uuid4())
                        is not None
                    )
                    await asyncio.sleep(commit_groups.HOLD / 3)
                await _until(lambda: not group._kept)  # given back once idle
                per_stretch.append(expiries)
        finally:
            await pool.close()
        return per_stretch

    per_stretch = await asyncio.to_thread(uvloop.run, idle_stretches())

    assert max(per_stretch) <= 4, per_stretch


@pytest.mark.parametrize("solo", [True, False])
async def test_a_lone_runs_statement_goes_from_its_callers_task(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, solo: bool
) -> None:
    # While its worker holds one run, the statement goes at once, without the group's task.
    # Negative control (two runs held): every statement goes through the group's task.
    ids = await _table(engine, 1)
    group = CommitGroup(engine.db.pool, solo=lambda: solo)
    groups = _count_groups(monkeypatch)
    for _ in range(3):
        row = await group.fetchrow(BUMP, "t", ids[0], 1)
        assert row is not None
    await asyncio.sleep(0)

    assert groups == [1] * (0 if solo else 3)
    assert (await _values(engine))[ids[0]] == 3
    group.give_back()


async def test_statements_that_arrive_while_a_lone_one_is_in_flight_go_after_it_as_a_group(
    engine: Engine,
) -> None:
    ids = await _table(engine, 4)
    group = CommitGroup(engine.db.pool, solo=lambda: True)
    slow = "SELECT id, pg_sleep(0.2)::text AS slept, txid_current() AS tx FROM grouped WHERE tag = $1 AND id = $2"

    first = asyncio.ensure_future(group.fetchrow(slow, "t", ids[0]))
    await asyncio.sleep(0.05)  # in flight, from its caller's task
    later = await asyncio.gather(*(group.fetchrow(BUMP, "t", i, 1) for i in ids[1:]))
    lone = await first

    assert lone is not None and lone["id"] == ids[0]
    assert [r["id"] for r in later if r] == ids[1:]
    assert len({r["tx"] for r in later if r}) == 1  # the three went together, after the lone one
    assert (await _values(engine)) == {ids[0]: 0, **{i: 1 for i in ids[1:]}}
    group.give_back()


async def test_a_lone_statement_that_fails_fails_its_caller_and_gives_its_connection_back(
    engine: Engine,
) -> None:
    ids = await _table(engine, 1)
    pool = engine.db.pool
    group = CommitGroup(pool, solo=lambda: True)
    idle = pool.get_idle_size()

    with pytest.raises(asyncpg.DivisionByZeroError):
        await group.fetchrow(BUMP, "t", ids[0], 0)
    assert pool.get_idle_size() == idle
    row = await group.fetchrow(BUMP, "t", ids[0], 1)  # the group goes on

    assert row is not None and row["v"] == 1
    group.give_back()


@pytest.mark.parametrize("runs", [1, 2])
async def test_a_worker_sends_a_lone_runs_checkpoints_at_once_and_groups_those_of_several(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, runs: int
) -> None:
    # One run held: its begin and checkpoints go from its driver, none through a group's task.
    # Two runs held at once (negative control): their statements go through the group.
    groups = _count_groups(monkeypatch)
    await engine.publish_workflow(chain("solo_chain", 8))
    started = [await engine.start_run("solo_chain") for _ in range(runs)]  # one claim takes them all
    async with running_worker(engine, dispatch=False):
        done = [await engine.wait_for_run(r.id, timeout=30) for r in started]

    assert [d.status.value for d in done] == ["completed"] * runs
    assert (not groups) is (runs == 1)


def _count_groups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets an item each time a commit group's task sends a group."""
    sent: list[int] = []
    send = CommitGroup._send

    async def counted(self: CommitGroup) -> None:
        sent.append(1)
        await send(self)

    monkeypatch.setattr(CommitGroup, "_send", counted)
    return sent
