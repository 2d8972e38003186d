"""Starting runs: the insert that makes a ready run, at most once per idempotency key.

``start_once`` is the general way; ``start_if_current`` the one-statement way for a caller
that remembers the workflow's version (``agentflow.run_starts``). Either inserts the run held
by a worker of the starting process when given a ``Lease`` (an eager start).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.frozen import frozen
from agentflow.core.records import RunRecord, VersionRecord
from agentflow.store.commit_groups import RowFetcher
from agentflow.store.database import WAKE_CHANNEL

_COLUMNS = """workspace_id, id, workflow_id, workflow_version, status, input, state,
                      enrollment_key, parent_run_id, due_at, start_key, start_hash, trace_parent,
                      conversation"""
# An eager start ($OWNER and $TTL: the lease's owner and seconds) makes the run already held by
# the starting process's worker, begun under fencing token 1 as a claim would make it: no
# NOTIFY, no claim, no begin on the way to its first step (``Lease``).
HELD_COLUMNS = ", fencing_token, began_token, lease_owner, lease_expires_at, started_at"
HELD_VALUES = ", 1, 1, $OWNER, now() + make_interval(secs => $TTL), now()"
"""The columns of a run inserted held (with $OWNER and $TTL to replace), for every insert that
starts runs eagerly (this module's, and the dispatcher's in ``store.dispatch``)."""
_READY = ("'created'", "now()", "", "", f", pg_notify('{WAKE_CHANNEL}', '')")
_HELD = ("'in_progress'", "now() + make_interval(secs => $TTL)", HELD_COLUMNS, HELD_VALUES, "")


def _insert(source: str, lease_at: int | None) -> str:
    """The start statement: ``source`` (VALUES or SELECT, with ``{status}`` and ``{due}``)
    inserted as a ready run, or, with ``lease_at`` (the owner's parameter number), a held one."""
    status, due, columns, values, notify = _READY if lease_at is None else _HELD
    sql = f"""
WITH ins AS (
    INSERT INTO runs ({_COLUMNS}{columns})
    {source.format(status=status, due=due, held=values)}
    ON CONFLICT (workspace_id, workflow_id, start_key) WHERE start_key IS NOT NULL DO NOTHING
    RETURNING *
)
SELECT ins.*{notify} FROM ins
"""
    if lease_at is not None:
        sql = sql.replace("$OWNER", f"${lease_at}").replace("$TTL", f"${lease_at + 1}::float8")
    return sql


_VALUES = "VALUES ($1, $2, $3, $4, {status}, $5, $6, $7, $8, {due}, $9, $10, $11, $12{held})"
_START, _START_HELD = _insert(_VALUES, None), _insert(_VALUES, 13)
_STARTED = "SELECT * FROM runs WHERE workspace_id = $1 AND workflow_id = $2 AND start_key = $3"
# The same insert, made only while the workflow is still what the caller remembers: that id,
# still called $12 when the caller named it, and at version $4 when it asked for the latest ($11).
_IF_CURRENT = """SELECT $1, $2, $3, $4, {status}, $5, $6, $7, $8, {due}, $9, $10, $13, $14{held}
    FROM workflows w
    WHERE w.workspace_id = $1 AND w.id = $3 AND ($11 IS NOT TRUE OR w.latest_version = $4)
      AND w.archived_at IS NULL
      AND ($12::text IS NULL OR w.name = $12)"""
_START_IF, _START_IF_HELD = _insert(_IF_CURRENT, None), _insert(_IF_CURRENT, 15)


@frozen
class Lease:
    """An eager start's lease: the run is inserted held by ``owner`` for ``ttl`` seconds."""

    owner: str
    ttl: float


async def start_if_current(
    pool: RowFetcher,
    workspace_id: UUID,
    run_id: UUID,
    version: VersionRecord,
    payload: Any,
    state: dict[str, Any],
    enrollment_key: str | None,
    key: StartKey | None,
    *,
    latest: bool,
    name: str | None,
    trace_parent: str | None = None,
    conversation: dict[str, Any] | None = None,
    lease: Lease | None = None,
) -> RunRecord | None:
    """Insert a ready run on ``version`` in one statement, if the workflow is still as the
    caller last saw it: it exists, is still called ``name`` (when given) and, with ``latest``,
    ``version`` is still its latest.

    Returns None when it is not, or when ``key`` was used before: then nothing was written
    and the caller takes the long way (``start_once`` after reading the version). With
    ``lease``, the run is inserted held (see ``Lease``).
    """
    args = (
        workspace_id, run_id, version.workflow_id, version.version, payload, state,
        enrollment_key, None, key.key if key else None, key.hash if key else None, latest, name,
        trace_parent, conversation,
    )  # fmt: skip
    if lease is None:
        row = await pool.fetchrow(_START_IF, *args)
    else:
        row = await pool.fetchrow(_START_IF_HELD, *args, lease.owner, lease.ttl)
    return RunRecord.from_row(row) if row is not None else None


@frozen
class StartKey:
    """What makes a start idempotent: its key, and a hash of what it asked for."""

    key: str
    hash: str


@frozen
class Started:
    """A start's run: the one it made, or (``replayed``) the one an earlier start with the
    same key made; ``start_hash`` is what that earlier start asked for."""

    run: RunRecord
    replayed: bool = False
    start_hash: str | None = None


async def start_once(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    run_id: UUID,
    workflow_id: UUID,
    version: int,
    payload: Any,
    state: dict[str, Any],
    enrollment_key: str | None = None,
    parent_run_id: UUID | None = None,
    key: StartKey | None = None,
    trace_parent: str | None = None,
    conversation: dict[str, Any] | None = None,
    lease: Lease | None = None,
) -> Started:
    """Insert a ready run, unless a run of the workflow already has ``key``: then that run.

    The unique index decides between concurrent starts with one key: the losers wait for the
    winner's commit, insert nothing, and read its run. With ``lease``, a run this start makes
    is inserted held (see ``Lease``); one it replays is as it is.
    """
    args = (
        workspace_id, run_id, workflow_id, version, payload, state, enrollment_key, parent_run_id,
        key.key if key else None, key.hash if key else None, trace_parent, conversation,
    )  # fmt: skip
    if lease is None:
        row = await pool.fetchrow(_START, *args)
    else:
        row = await pool.fetchrow(_START_HELD, *args, lease.owner, lease.ttl)
    if row is not None:
        return Started(RunRecord.from_row(row))
    assert key is not None  # only a keyed start can conflict
    earlier = await pool.fetchrow(_STARTED, workspace_id, workflow_id, key.key)
    if earlier is None:  # deleted by retention between the two statements: start afresh
        return await start_once(
            pool, workspace_id, run_id, workflow_id, version, payload, state, enrollment_key,
            parent_run_id, key, trace_parent, conversation, lease,
        )  # fmt: skip
    return Started(RunRecord.from_row(earlier), replayed=True, start_hash=earlier["start_hash"])
