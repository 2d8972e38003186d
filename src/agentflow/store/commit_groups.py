"""Group commit: the checkpoints of several runs share one transaction and one commit.

A worker drives many runs at once, and each step ends in a checkpoint: one statement and one
commit. Sent one by one, a commit each, they cost PostgreSQL a WAL flush and the worker a round
trip per step. A ``CommitGroup`` gathers the statements that arrive while an earlier group is
in flight and sends each distinct statement of the group pipelined over its runs
(``Connection.fetchmany``): one round trip and one commit for many runs. Different statements
of a group (a run's ``begin`` beside other runs' checkpoints) go at once, each in its own
transaction.

Nothing is acknowledged before its commit, and each run's statement keeps its own fence (its
lease token in its own ``WHERE``): a run whose lease was lost gets no row, exactly as alone.
When one statement of a transaction fails, the transaction rolls back and each of its
statements is sent again on its own, so that only the failing one fails; when the database is
unavailable (the commit may or may not have happened) every caller of that transaction gets
the error, as a lone statement would.

While its worker holds a single run (``solo``), nothing could share that run's commit (a
group holds one statement per run): its statement goes at once from its caller's own task,
without the group's task and the loop's turns that hand the statement and its answer across.
Statements that arrive meanwhile wait for it and then go as a group.

A group keeps the connections it sent on for a moment (``HOLD``) instead of giving each back
to the pool at once: a run's next step sends again well within it, and the pool's acquire and
release (a task and several turns of the loop, which ran just when the next step sent its
checkpoint) are skipped. A connection idle for ``HOLD`` goes back to the pool; one whose
statement failed goes back at once, so a broken connection is never reused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

import asyncpg

from agentflow.store.database import unavailable

MAX_GROUP = 64
"""Statements per transaction at most: a bigger group holds its rows' locks longer.

One group is in flight at a time: measured on W1, groups sent two or three at once, or a lone
statement sent at once whenever nothing waits, were slower (smaller groups, more commits); a
statement goes at once only while its worker holds one run (``solo``, benchmarks/README.md)."""
HOLD = 0.005
"""Seconds a group keeps an idle connection before it goes back to the pool."""
MAX_KEPT = 4
"""Idle connections a group keeps at most (a group's distinct statements go at once), and
never more than a quarter of its pool's (a small pool's other users must not wait for them)."""
TICK = 0.001
"""The coarsest event loop clock's step (uvloop's counts whole milliseconds): an idle stretch
closer than this to ``HOLD`` counts as over, else its timer would fire again and again within
one tick, the clock unchanged, spinning the loop for up to a millisecond."""


class RowFetcher(Protocol):
    """What sends one statement and answers its row: a pool, or a ``CommitGroup``."""

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None: ...  # pragma: no cover


@dataclass
class _Pending:
    query: str
    args: tuple[Any, ...]
    future: asyncio.Future[asyncpg.Record | None] = field(repr=False)

    @property
    def run_id(self) -> UUID:
        return self.args[1]  # type: ignore[no-any-return]


class CommitGroup:
    """Sends run statements in shared transactions (see the module's docstring).

    Every statement sent through ``fetchrow`` must be about one run, take the run's id as its
    second parameter, and answer at most one row, with that id in its ``id`` column (the
    checkpoint and ``begin`` do). A group holds at most one statement per run.

    Args:
        pool: where the group's connections come from.
        solo: whether one run at most sends now (its worker holds one run): a statement then
            goes from its caller's task when nothing else is in flight or waiting.
    """

    def __init__(self, pool: asyncpg.Pool, solo: Callable[[], bool] | None = None) -> None:
        self._pool = pool
        self._solo = solo
        self._pending: list[_Pending] = []
        self._sending: asyncio.Task[None] | None = None
        self._direct = False  # a statement sent from its caller's task is in flight
        self._kept: list[Any] = []  # idle connections (the pool's proxies), newest last
        self._max_kept = min(MAX_KEPT, pool.get_max_size() // 4)
        self._last_used = 0.0
        self._expiry: asyncio.TimerHandle | None = None
        self._giving_back: set[asyncio.Task[None]] = set()

    @property
    def pool(self) -> asyncpg.Pool:
        """The pool the groups' connections come from."""
        return self._pool

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        """Send ``query`` with the next group; its row once that group's transaction committed.

        Raises:
            TypeError: the second argument is not a run's id (the group could not place it).
        """
        if len(args) < 2 or not isinstance(args[1], UUID):
            # Refused here: taken into a group, it would fail the group's task, and the
            # group would take it again and again.
            raise TypeError(f"a grouped statement takes its run's id as its second argument: {args[:2]!r}")
        if self._idle() and self._solo is not None and self._solo():
            return await self._send_direct(query, args)
        future: asyncio.Future[asyncpg.Record | None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(query, args, future))
        self._send_next()
        return await future

    def _idle(self) -> bool:
        """Nothing in flight and nothing waiting."""
        return self._sending is None and not self._direct and not self._pending

    async def _send_direct(self, query: str, args: tuple[Any, ...]) -> asyncpg.Record | None:
        """Send one statement from its caller's task; the statements that arrive meanwhile
        wait for it, as for a group in flight."""
        self._direct = True
        try:
            return await self._fetch_one(query, args)
        finally:
            self._direct = False
            self._send_next()

    def _send_next(self) -> None:
        """Send the pending statements unless a group is in flight (then they go when it is
        done). The group starts on the loop's next turn: statements of this turn join it."""
        if self._pending and self._sending is None and not self._direct:
            self._sending = asyncio.get_running_loop().create_task(self._send())
            self._sending.add_done_callback(self._sent)

    def _sent(self, _task: asyncio.Task[None]) -> None:
        self._sending = None
        self._send_next()

    def _take(self) -> list[_Pending]:
        """The next group: pending statements in order, one per run, at most ``MAX_GROUP``."""
        group: list[_Pending] = []
        later: list[_Pending] = []
        runs: set[UUID] = set()
        for item in self._pending:
            if item.future.done():  # its caller gave up before it was sent
                continue
            if len(group) < MAX_GROUP and item.run_id not in runs:
                runs.add(item.run_id)
                group.append(item)
            else:
                later.append(item)
        self._pending = later
        return group

    async def _send(self) -> None:
        group = self._take()
        try:
            await self._send_group(group)
        finally:
            for item in group:  # cut off (the worker stops): its caller must not wait forever
                if not item.future.done():
                    item.future.cancel()

    async def _send_group(self, group: list[_Pending]) -> None:
        stretches: dict[str, list[_Pending]] = {}
        for item in group:
            stretches.setdefault(item.query, []).append(item)
        if len(stretches) == 1:  # the usual group (and a lone run's): no task to gather
            await self._send_stretch(group)
            return
        # Different statements are about different runs (one statement per run in a group):
        # their transactions cannot wait on each other, so they go at once.
        await asyncio.gather(*(self._send_stretch(items) for items in stretches.values()))

    async def _send_stretch(self, items: list[_Pending]) -> None:
        """One statement over its runs, pipelined in one transaction."""
        if len(items) == 1:
            await self._alone(items[0])
            return
        # Rows are locked in the order of their runs' ids, as the heartbeat locks them: two
        # such transactions never wait on each other in a cycle.
        items.sort(key=lambda item: item.run_id)
        try:
            conn = await self._connection()
            try:
                # fetchmany pipelines the statement over its arguments and ends with a single
                # Sync: PostgreSQL runs them as one implicit transaction (all or nothing, one
                # commit) in one round trip, with no BEGIN or COMMIT round trip of its own.
                rows = await conn.fetchmany(items[0].query, [item.args for item in items])
            except BaseException:
                await self._pool.release(conn)
                raise
        except Exception as exc:
            if unavailable(exc):  # the commit may or may not have happened: as alone
                for item in items:
                    _settle(item, exc=exc)
                return
            # One statement failed and rolled back the others: each again alone.
            await asyncio.gather(*(self._alone(item) for item in items))
            return
        self._keep(conn)
        by_run = {row["id"]: row for row in rows}
        for item in items:
            _settle(item, row=by_run.get(item.run_id))

    async def _alone(self, item: _Pending) -> None:
        try:
            row = await self._fetch_one(item.query, item.args)
        except Exception as exc:
            _settle(item, exc=exc)
            return
        _settle(item, row=row)

    async def _fetch_one(self, query: str, args: tuple[Any, ...]) -> asyncpg.Record | None:
        """One statement in its own transaction; its connection is kept when it succeeded."""
        conn = await self._connection()
        try:
            row: asyncpg.Record | None = await conn.fetchrow(query, *args)
        except BaseException:
            await self._pool.release(conn)
            raise
        self._keep(conn)
        return row

    async def _connection(self) -> Any:
        """An idle connection the group kept, else one from the pool. One the server closed
        meanwhile is not used, as the pool skips its own closed ones (asyncpg has given it
        back to the pool already, or the pool gets it back and replaces it)."""
        while self._kept:
            conn = self._kept.pop()
            try:
                if not conn.is_closed():
                    return conn
            except asyncpg.InterfaceError:  # closed, and already back in the pool
                continue
            self._give_back([conn])
        return await self._pool.acquire()

    def _keep(self, conn: Any) -> None:
        """Keep ``conn`` (its statement succeeded) for the next statement, for ``HOLD``."""
        if len(self._kept) >= self._max_kept:
            self._give_back([conn])
            return
        self._kept.append(conn)
        loop = asyncio.get_running_loop()
        self._last_used = loop.time()
        if self._expiry is None:  # one timer per idle stretch, not one per statement
            self._expiry = loop.call_later(HOLD, self._expire)

    def _expire(self) -> None:
        self._expiry = None
        loop = asyncio.get_running_loop()
        rest = self._last_used + HOLD - loop.time()
        if rest >= TICK and self._kept:  # used meanwhile: look again when it may be idle
            self._expiry = loop.call_later(rest, self._expire)
            return
        self.give_back()

    def give_back(self) -> None:
        """Give the kept connections back to the pool now (they would go once idle for ``HOLD``)."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        kept, self._kept = self._kept, []
        self._give_back(kept)

    def _give_back(self, connections: list[Any]) -> None:
        for conn in connections:
            task = asyncio.get_running_loop().create_task(self._pool.release(conn))
            self._giving_back.add(task)
            task.add_done_callback(self._giving_back.discard)


def _settle(item: _Pending, *, row: asyncpg.Record | None = None, exc: BaseException | None = None) -> None:
    if item.future.done():  # its caller was canceled meanwhile: the outcome is its fence's
        return
    if exc is not None:
        item.future.set_exception(exc)
    else:
        item.future.set_result(row)
