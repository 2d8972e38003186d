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
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

import asyncpg

from agentflow.store.database import unavailable

MAX_GROUP = 64
"""Statements per transaction at most: a bigger group holds its rows' locks longer.

One group is in flight at a time: measured on W1, groups sent two or three at once, or a lone
statement sent at once while nothing waits, were slower (smaller groups, more commits) and
did not make a lone run's step faster (benchmarks/README.md)."""


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
    """

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._pending: list[_Pending] = []
        self._sending: asyncio.Task[None] | None = None

    @property
    def pool(self) -> asyncpg.Pool:
        """The pool the groups' connections come from."""
        return self._pool

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        """Send ``query`` with the next group; its row once that group's transaction committed."""
        future: asyncio.Future[asyncpg.Record | None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(query, args, future))
        self._send_next()
        return await future

    def _send_next(self) -> None:
        """Send the pending statements unless a group is in flight (then they go when it is
        done). The group starts on the loop's next turn: statements of this turn join it."""
        if self._pending and self._sending is None:
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
            await _alone(self._pool, items[0])
            return
        # Rows are locked in the order of their runs' ids, as the heartbeat locks them: two
        # such transactions never wait on each other in a cycle.
        items.sort(key=lambda item: item.run_id)
        answered = False
        try:
            async with self._pool.acquire() as conn:
                # fetchmany pipelines the statement over its arguments and ends with a single
                # Sync: PostgreSQL runs them as one implicit transaction (all or nothing, one
                # commit) in one round trip, with no BEGIN or COMMIT round trip of its own.
                rows = await conn.fetchmany(items[0].query, [item.args for item in items])
                # Answered before the connection goes back: the callers go on meanwhile.
                answered = True
                by_run = {row["id"]: row for row in rows}
                for item in items:
                    _settle(item, row=by_run.get(item.run_id))
        except Exception as exc:
            if answered:  # committed; only giving the connection back failed (the pool's care)
                return
            if unavailable(exc):  # the commit may or may not have happened: as alone
                for item in items:
                    _settle(item, exc=exc)
                return
            # One statement failed and rolled back the others: each again alone.
            await asyncio.gather(*(_alone(self._pool, item) for item in items))


async def _alone(pool: asyncpg.Pool, item: _Pending) -> None:
    try:
        async with pool.acquire() as conn:
            # Answered before the connection goes back (the pool's release takes a task and
            # three turns of the loop): the caller goes on meanwhile.
            _settle(item, row=await conn.fetchrow(item.query, *item.args))
    except Exception as exc:
        _settle(item, exc=exc)


def _settle(item: _Pending, *, row: asyncpg.Record | None = None, exc: BaseException | None = None) -> None:
    if item.future.done():  # its caller was canceled meanwhile: the outcome is its fence's
        return
    if exc is not None:
        item.future.set_exception(exc)
    else:
        item.future.set_result(row)
