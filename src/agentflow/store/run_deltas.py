"""A run's stream of partial output: a model's text while it is written (issue 12).

``DeltaWriter`` buffers what a model call streams and writes it in small batches from the
worker, best-effort: a failed write is logged and dropped, never the step's concern, since the
step's result is its checkpoint. Readers follow a run below the horizon, in (xid, seq) order
(as the event log), so resuming after a cursor skips nothing that committed late.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime
from uuid import UUID

import asyncpg

from agentflow.core.frozen import frozen

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 0.1
"""How long streamed text may wait in the buffer before it is written."""
MAX_STEP_CHARS = 1_000_000
"""A step streams at most this much text; past it the rest reaches readers with the checkpoint."""
RETENTION_SECONDS = 86_400.0

_APPEND = """
INSERT INTO run_deltas (workspace_id, run_id, step_seq, attempt, kind, data)
SELECT $1, $2, $3, $4, k, d FROM unnest($5::text[], $6::text[]) WITH ORDINALITY AS x(k, d, n)
ORDER BY n
"""
_AFTER = """
SELECT xid, seq, step_seq, attempt, kind, data, created_at FROM run_deltas
WHERE workspace_id = $1 AND run_id = $2 AND (xid, seq) > ($3::xid8, $4::bigint)
  AND xid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY xid, seq
LIMIT $5
"""
_PRUNE = "DELETE FROM run_deltas WHERE created_at < now() - make_interval(secs => $1)"


@frozen
class Delta:
    """One streamed piece: ``text`` (append ``data``) or ``restart`` (the call began again:
    drop what this step streamed so far)."""

    xid: int
    seq: int
    step: int
    attempt: int
    kind: str
    data: str
    at: datetime


class DeltaWriter:
    """The sink a streaming model call writes to, for one attempt of one step.

    Args:
        pool: the database pool.
        workspace_id / run_id / step / attempt: where the text belongs.
    """

    def __init__(self, pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID, step: int, attempt: int) -> None:
        self._pool = pool
        self._where = (workspace_id, run_id, step, attempt)
        self._kinds: list[str] = []
        self._data: list[str] = []
        self._written = 0
        self._flusher: asyncio.Task[None] | None = None
        self._sleeping = False

    def restart(self) -> None:
        """The call starts (again): readers drop this step's text so far."""
        if self._written or self._data:
            self._push("restart", "")

    def text(self, chunk: str) -> None:
        """Text the model just wrote."""
        if not chunk or self._written >= MAX_STEP_CHARS:
            return
        chunk = chunk[: MAX_STEP_CHARS - self._written]
        self._written += len(chunk)
        self._push("text", chunk)

    async def close(self) -> None:
        """Write what is buffered (the call is over)."""
        flusher = self._flusher
        if flusher is not None and not flusher.done():
            if self._sleeping:  # cancel only a wait, never a write under way
                flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
        self._flusher = None
        await self._flush()

    def _push(self, kind: str, data: str) -> None:
        self._kinds.append(kind)
        self._data.append(data)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        while self._kinds:
            self._sleeping = True
            try:
                await asyncio.sleep(FLUSH_SECONDS)
            finally:
                self._sleeping = False
            await self._flush()

    async def _flush(self) -> None:
        if not self._kinds:
            return
        kinds, data = self._kinds, self._data
        self._kinds, self._data = [], []
        try:
            await self._pool.execute(_APPEND, *self._where, kinds, data)
        except (asyncpg.PostgresError, OSError, TimeoutError) as exc:
            logger.warning("streamed text of run %s step %s dropped: %s", self._where[1], self._where[2], exc)


async def after(
    pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID, cursor: tuple[int, int], limit: int = 500
) -> list[Delta]:
    """The run's deltas after ``cursor`` (``(xid, seq)``; ``(0, 0)`` from the start)."""
    rows = await pool.fetch(_AFTER, workspace_id, run_id, cursor[0], cursor[1], limit)
    return [
        Delta(int(r["xid"]), r["seq"], r["step_seq"], r["attempt"], r["kind"], r["data"], r["created_at"])
        for r in rows
    ]


async def prune(pool: asyncpg.Pool, older_than: float = RETENTION_SECONDS) -> int:
    """Delete deltas older than ``older_than`` seconds; return how many."""
    status = await pool.execute(_PRUNE, older_than)
    return int(status.split()[-1])
