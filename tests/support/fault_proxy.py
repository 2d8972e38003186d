"""A TCP proxy in front of PostgreSQL that injects storage faults into the wire protocol.

Engine processes connect to the proxy instead of the server. The proxy follows the
PostgreSQL protocol just enough to know where each request cycle ends (a ``Sync`` of the
extended protocol, or a simple ``Query``) and which SQL the cycle executed; at a chosen
share of those cycles it cuts the connection:

* ``cut_before``: the cycle is never forwarded. The server sees the client vanish: what the
  cycle would have done does not happen (an open transaction is rolled back).
* ``lose_reply``: the cycle is forwarded, the server runs it to the end (its
  ``ReadyForQuery``), and the proxy then cuts the connection without passing one byte of the
  reply on. When the cycle committed (the server is idle again, no error was sent), the
  client sees a connection error for a write that **is** committed: "committed but reported
  failed", the fault a careful client cannot tell from a failed write.
* ``refused``: a new connection is closed before the server sees it.
* ``stalled`` (only when asked for, ``stall``): the cycle is forwarded and the server runs it,
  but no byte of its reply is passed on and the link stays open, silent both ways, until the
  client closes it: a half-open connection (a host that vanished, a dead middlebox). Only a
  client that bounds its wait for a reply gets its caller back.

Each cycle is classified by its SQL (``classify``) so a test can show which of the engine's
paths met which fault: every ``lose_reply`` records whether the cycle committed a write.
Faults are off until ``enable``; decisions come from a seeded random generator (the order
of cycles across connections is not repeatable, the rate and mix are). ``ensure`` asks for
at least N faults of a kind on a category (for ``lose_reply``: N commits reported failed):
while a category is short of one, its cycles are hit with that kind at ``boost`` on top of
the base rate, so coverage never depends on luck (as R1 does with its failpoints); the
effective overall rate is reported with the counts.

Example:
    >>> with FaultProxy(upstream_of(url), seed=7) as proxy:  # doctest: +SKIP
    ...     proxy.enable(0.03)
    ...     engine_url = proxy.url(url)
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import socket
import struct
import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Self

from tests.support.cycles import CATEGORIES, Cycle, classify, lost_reply_outcome
from tests.support.pg_wire import Upstream, cstring, frames, pass_startup, through_port, upstream_of

__all__ = ["CUT_BEFORE", "KINDS", "LOSE_REPLY", "STALL", "FaultProxy", "Upstream", "classify", "upstream_of"]

CUT_BEFORE = "cut_before"
LOSE_REPLY = "lose_reply"
STALL = "stall"
KINDS = (CUT_BEFORE, LOSE_REPLY)


@dataclass
class _Link:
    """One client connection and its server connection."""

    number: int
    statements: dict[str, str] = field(default_factory=dict)
    pending: deque[Cycle] = field(default_factory=deque)
    transaction_sql: list[str] = field(default_factory=list)
    in_transaction: bool = False


class _Cut(Exception):
    """Close both sides of the link now."""


class FaultProxy:
    """A fault-injecting PostgreSQL proxy on 127.0.0.1 (a free port), in its own thread.

    Args:
        upstream: the real server.
        seed: seeds the fault decisions.
        reply_share: the share of faults that are ``lose_reply`` (the rest ``cut_before``).
        refuse_share: new connections are refused at ``rate * refuse_share``.
        ensure: (category, kind) -> the minimum of those faults (see the module docstring).
        boost: the rate of a category still short of its ``ensure`` minimum.
        categories: (name, pattern) pairs tried before ``CATEGORIES`` (a test's own SQL).
    """

    def __init__(
        self,
        upstream: Upstream,
        *,
        seed: int,
        reply_share: float = 0.65,
        refuse_share: float = 0.5,
        ensure: dict[tuple[str, str], int] | None = None,
        boost: float = 0.25,
        categories: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.upstream = upstream
        self.categories = (
            tuple((name, re.compile(pattern, re.IGNORECASE | re.DOTALL)) for name, pattern in categories)
            + CATEGORIES
        )
        self.reply_share = reply_share
        self.refuse_share = refuse_share
        self.ensure = dict(ensure or {})
        self.boost = boost
        self.rate = 0.0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._cycles: Counter[str] = Counter()
        self._faults: Counter[tuple[str, str]] = Counter()  # (category, outcome)
        self._stalls: Counter[str] = Counter()  # category -> cycles still to stall
        self._links = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self.port = 0

    # Lifecycle ---------------------------------------------------------------------------

    def start(self) -> Self:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fault proxy did not start")
        return self

    def close(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def url(self, server_url: str) -> str:
        """``server_url`` (same user, database and other parameters) through the proxy."""
        return through_port(server_url, self.port)

    def enable(self, rate: float) -> None:
        """Inject faults at ``rate`` per request cycle (and per new connection, scaled)."""
        self.rate = rate

    def disable(self) -> None:
        self.rate = 0.0

    def stall(self, category: str, count: int = 1) -> None:
        """Stall the next ``count`` cycles of ``category`` (see ``stalled`` above), whatever
        the rate."""
        with self._lock:
            self._stalls[category] += count

    def stalled(self, category: str) -> int:
        """Cycles of ``category`` stalled so far."""
        return self.faults(category, "stalled")

    # What happened -------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Cycles per category, faults per category and outcome, the effective rate."""
        with self._lock:
            cycles = sum(self._cycles.values())
            injected = sum(self._faults.values())
            refused = self._counts["refused"]
            return {
                "connections": self._links,
                "cycles": cycles,
                "cycles_by_category": dict(sorted(self._cycles.items())),
                "faults": injected + refused,
                "effective_rate": round(injected / cycles, 4) if cycles else 0.0,
                "refused_connections": refused,
                "faults_by_category": {
                    f"{c}:{o}": n for (c, o), n in sorted(self._faults.items(), key=lambda kv: kv[0])
                },
                "committed_but_reported_failed": sum(
                    n for (_c, o), n in self._faults.items() if o == "committed_but_reported_failed"
                ),
            }

    def faults(self, category: str, outcome: str) -> int:
        """Faults of ``outcome`` (``cut_before``, ``committed_but_reported_failed``,
        ``reply_lost_in_transaction``, ``reply_lost_after_error``, ``reply_lost_read``,
        ``reply_lost_no_change``) met by ``category``."""
        with self._lock:
            return self._faults[(category, outcome)]

    # The proxy -----------------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(asyncio.sleep(0.05))
            self._loop.close()

    def _decide(self, category: str) -> str:
        """``pass``, ``cut_before``, ``lose_reply`` or ``stall`` for one cycle of ``category``."""
        with self._lock:
            if self._stalls[category] > 0:
                self._stalls[category] -= 1
                return STALL
        rate = self.rate
        if rate <= 0:
            return "pass"
        with self._lock:
            short = [
                kind
                for (name, kind), minimum in self.ensure.items()
                if name == category and self._kind_count(name, kind) < minimum
            ]
        if short and self._rng.random() < self.boost:
            return self._rng.choice(short)
        if self._rng.random() >= rate:
            return "pass"
        return LOSE_REPLY if self._rng.random() < self.reply_share else CUT_BEFORE

    def _kind_count(self, category: str, kind: str) -> int:
        if kind == CUT_BEFORE:
            return self._faults[(category, CUT_BEFORE)]
        return self._faults[(category, "committed_but_reported_failed")]

    def _record(self, category: str, outcome: str) -> None:
        with self._lock:
            self._faults[(category, outcome)] += 1

    async def _serve(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        with self._lock:
            self._links += 1
            link = _Link(self._links)
        swriter: asyncio.StreamWriter | None = None
        try:
            if self.rate > 0 and self._rng.random() < self.rate * self.refuse_share:
                with self._lock:
                    self._counts["refused"] += 1
                return
            sreader, swriter = await self.upstream.connect()
            up = asyncio.create_task(self._client_to_server(link, creader, cwriter, swriter))
            down = asyncio.create_task(self._server_to_client(link, sreader, cwriter))
            _done, pending = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            await asyncio.gather(up, down, return_exceptions=True)
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the server is gone, or the proxy is closing
        finally:
            for writer in (cwriter, swriter):
                if writer is not None:
                    with contextlib.suppress(Exception):
                        # An abrupt close (RST where possible): the peer sees a broken link.
                        sock = writer.get_extra_info("socket")
                        if sock is not None and sock.family != socket.AF_UNIX:
                            with contextlib.suppress(OSError):
                                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        writer.close()

    async def _client_to_server(
        self,
        link: _Link,
        reader: asyncio.StreamReader,
        cwriter: asyncio.StreamWriter,
        swriter: asyncio.StreamWriter,
    ) -> None:
        await pass_startup(reader, cwriter, swriter)
        buffer = bytearray()
        executed: list[str] = []
        data = bytearray()
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                if buffer:
                    swriter.write(bytes(buffer))
                    await swriter.drain()
                return
            data += chunk
            offset = 0
            for kind, start, end in frames(data):
                message = bytes(data[start:end])
                offset = end
                body = message[5:]
                if kind == b"P":
                    name, rest = cstring(body)
                    query, _ = cstring(rest)
                    link.statements[name] = query
                elif kind == b"B":
                    _portal, rest = cstring(body)
                    statement, _ = cstring(rest)
                    executed.append(link.statements.get(statement, ""))
                elif kind == b"Q":
                    executed.append(body[:-1].decode("utf-8", "replace"))
                buffer += message
                if kind in (b"S", b"Q"):
                    sql = "\n".join(executed)
                    executed = []
                    category, writes = self._cycle_category(link, sql)
                    with self._lock:
                        self._cycles[category] += 1
                    fate = self._decide(category)
                    if fate == CUT_BEFORE:
                        self._record(category, CUT_BEFORE)
                        raise _Cut
                    link.pending.append(Cycle(fate, category, writes))
                    swriter.write(bytes(buffer))
                    buffer.clear()
                elif kind in (b"H", b"X", b"d", b"c", b"f"):
                    swriter.write(bytes(buffer))
                    buffer.clear()
            del data[:offset]
            await swriter.drain()

    def _cycle_category(self, link: _Link, sql: str) -> tuple[str, bool]:
        """The category of a cycle; a COMMIT is named by its transaction's statements."""
        head = sql.strip().upper()
        if head.startswith(("BEGIN", "START TRANSACTION")):
            link.transaction_sql, link.in_transaction = [], True
            return "begin", False
        if head.startswith("COMMIT"):
            whole = "\n".join(link.transaction_sql)
            link.transaction_sql, link.in_transaction = [], False
            category = classify(whole, self.categories)
            return (category if category != "read" else "commit_read_only"), category != "read"
        if head.startswith("ROLLBACK"):
            link.transaction_sql, link.in_transaction = [], False
            return "rollback", False
        if link.in_transaction:
            link.transaction_sql.append(sql)
        category = classify(sql, self.categories)
        return category, category != "read"

    async def _server_to_client(
        self, link: _Link, reader: asyncio.StreamReader, cwriter: asyncio.StreamWriter
    ) -> None:
        data = bytearray()
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            data += chunk
            offset = 0
            forward_from = 0
            out = bytearray()
            for kind, offset, end in frames(data):
                cycle = link.pending[0] if link.pending else None
                if cycle is not None and cycle.fate == STALL:
                    out += data[forward_from:offset]  # what belonged to earlier cycles
                    if out:
                        cwriter.write(bytes(out))
                        with contextlib.suppress(Exception):
                            await cwriter.drain()
                    self._record(cycle.category, "stalled")
                    # Silent from now on: the server's reply is read and dropped (the server is
                    # never blocked on it); the link ends when the client closes it.
                    while await reader.read(65536):
                        pass
                    return
                if cycle is not None and cycle.fate == LOSE_REPLY:
                    out += data[forward_from:offset]  # what belonged to earlier cycles
                    if kind == b"E":
                        cycle.error = True
                    elif kind == b"D":
                        # A row sent back: with a row limit (asyncpg's fetchrow) the portal is
                        # suspended and no command tag counts the rows, so count them here.
                        cycle.data_rows += 1
                    elif kind == b"C":
                        tag = bytes(data[offset + 5 : end - 1]).decode("ascii", "replace")
                        cycle.committed |= tag == "COMMIT"
                        last = tag.rsplit(" ", 1)[-1]
                        cycle.rows += int(last) if last.isdigit() else 0
                    elif kind == b"Z":
                        status = bytes(data[offset + 5 : offset + 6])
                        self._record(cycle.category, lost_reply_outcome(cycle, status))
                        if out:
                            cwriter.write(bytes(out))
                            with contextlib.suppress(Exception):
                                await cwriter.drain()
                        raise _Cut
                    offset = end
                    forward_from = end
                    continue
                if kind == b"Z" and link.pending:
                    link.pending.popleft()
                offset = end
            out += data[forward_from:offset]
            del data[:offset]
            if out:
                cwriter.write(bytes(out))
                await cwriter.drain()
