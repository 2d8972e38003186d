"""Named queries of dispatch: listening workflows, start-or-enroll (decisions: ``decisions``).

They run on the caller's connection, inside its transaction: the dispatcher's (with its
cursor in the event log), a webhook's (with the event it stored), the scheduler's (a closing
debounce window) or the gatekeeper's (a gate verdict). A decision's runs, inbox rows and
record commit together or not at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple
from uuid import UUID

from agentflow.core.frozen import frozen
from agentflow.core.records import RunRecord, VersionRecord
from agentflow.store import inbox, runs
from agentflow.store.database import WAKE_CHANNEL, Connection
from agentflow.store.run_starts import HELD_COLUMNS, HELD_VALUES, Lease

# A key's active run can end between our look and our insert; a few rounds always settle it.
_ROUNDS = 8


class EnrollmentContention(RuntimeError):
    """The key's active run kept changing under us; the caller's transaction should retry."""


async def listening_workflows(
    conn: Connection, known: Mapping[tuple[UUID, UUID, int], VersionRecord] | None = None
) -> list[VersionRecord]:
    """Latest versions of enabled, non-draft workflows that a topic can start.

    Those that declare a trigger with topics, and agent workflows (their ``sources`` are
    topics too). Versions are immutable: those in ``known`` (by workspace, workflow and
    version) come back from it, and only the others' configs are read and decoded.
    """
    known = known or {}
    rows = await conn.fetch(
        "SELECT v.workspace_id, v.workflow_id, v.version, v.content_hash, v.created_at,"
        " CASE WHEN (v.workspace_id, v.workflow_id, v.version)"
        "   IN (SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::int[]))"
        " THEN NULL ELSE v.config END AS config"
        " FROM workflows w JOIN workflow_versions v ON v.workspace_id = w.workspace_id"
        " AND v.workflow_id = w.id AND v.version = w.latest_version"
        " WHERE w.enabled AND NOT w.draft"
        " AND (jsonb_array_length(coalesce(v.config #> '{trigger,topics}', '[]')) > 0"
        "      OR jsonb_array_length(coalesce(v.config -> 'sources', '[]')) > 0)",
        [ws for ws, _, _ in known],
        [wf for _, wf, _ in known],
        [version for _, _, version in known],
    )
    return [
        VersionRecord.from_row(r)
        if r["config"] is not None
        else known[(r["workspace_id"], r["workflow_id"], r["version"])]
        for r in rows
    ]


# A started run and its trigger rows, ready ($9: the lease's owner, $10 its seconds, to hold it).
_START_KEYED = """
WITH r AS (
    INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input, state,
                      enrollment_key, trigger, conversation, trace_parent, due_at$HELD_COLUMNS)
    VALUES ($1, gen_random_uuid(), $2, $3, $STATUS, $4, $5, $6, $7, $7::jsonb -> 'conversation',
            $7::jsonb ->> 'trace_parent', $DUE$HELD_VALUES)
    ON CONFLICT (workspace_id, workflow_id, enrollment_key)
    WHERE active AND enrollment_key IS NOT NULL DO NOTHING RETURNING *
), i AS (
    INSERT INTO run_inbox (workspace_id, run_id, kind, payload, consumed_at, consumed_seq)
    SELECT $1, r.id, 'trigger', doc, now(), 0 FROM r, unnest($8::jsonb[]) AS doc
)
SELECT $RESULT FROM r
"""
_START_KEYED_HELD = (
    _START_KEYED.replace("$HELD_COLUMNS", HELD_COLUMNS).replace("$HELD_VALUES", HELD_VALUES)
    .replace("$STATUS", "'in_progress'").replace("$DUE", "now() + make_interval(secs => $TTL)")
    .replace("$RESULT", "r.*").replace("$OWNER", "$9").replace("$TTL", "$10::float8")
)  # fmt: skip
_START_KEYED = (
    _START_KEYED.replace("$HELD_COLUMNS", "").replace("$HELD_VALUES", "").replace("$STATUS", "'created'")
    .replace("$DUE", "now()").replace("$RESULT", f"id, pg_notify('{WAKE_CHANNEL}', '') IS NULL")
)  # fmt: skip


@frozen
class Enrolled:
    """What happened to a matching event: ``started`` a run, ``enrolled`` into one, ..."""

    decision: str
    run_id: UUID | None
    replaced: UUID | None = None  # the run a restart canceled
    held: RunRecord | None = None  # the run started, inserted held under the caller's lease


async def start_or_enroll(
    conn: Connection,
    workspace_id: UUID,
    workflow_id: UUID,
    version: int,
    key: str | None,
    reuse: str,
    mode: str,
    payload: Any,
    state: dict[str, Any],
    trigger: dict[str, Any],
    event_docs: list[dict[str, Any]],
    *,
    tell_canceled: bool = False,
    lease: Lease | None = None,
) -> Enrolled:
    """Start a run for the key, or act on the key's active run as ``mode`` says (G3).

    Args:
        conn: a connection inside the caller's transaction.
        key: the enrollment key (None: runs for this event never conflict).
        reuse / mode: the trigger's policies.
        payload / state / trigger: the new run's input, initial state and trigger document.
        event_docs: the events this decision is about (one, or a debounce window's); a new
            run records them as consumed trigger rows in its inbox, an active run receives
            them as new inbox events.
        tell_canceled: a run ``restart`` cancels publishes ``run.canceled`` with the cancel.
        lease: insert a new run held under it (an eager start, ``store.run_starts.Lease``);
            it comes back in ``Enrolled.held``.

    Raises:
        EnrollmentContention: the key's runs kept changing for ``_ROUNDS`` rounds.
    """
    replaced = None
    if mode == "parallel":
        key = None  # runs do not hold the key, so they may overlap
    for _ in range(_ROUNDS):
        if key is not None:
            active = await _active_run(conn, workspace_id, workflow_id, key)
            if active is not None and mode == "skip":
                return Enrolled("skipped", active)
            if active is not None and mode == "restart":
                await runs.cancel(
                    conn, workspace_id, active, "restarted_by_event", release_key=True, tell=tell_canceled
                )
                replaced = active
            elif active is not None:
                if await _enroll(conn, workspace_id, active, event_docs):
                    return Enrolled("enrolled", active)
                continue  # it ended meanwhile: look again
            if (
                replaced is None
                and reuse != "allow"
                and await _reuse_refused(conn, workspace_id, workflow_id, key, reuse)
            ):
                return Enrolled("reuse_rejected", None)
        # The run and its trigger rows in one statement (one round trip per start).
        args = (workspace_id, workflow_id, version, payload, state, key, trigger, event_docs)
        if lease is None:
            run_id = await conn.fetchval(_START_KEYED, *args)
            if run_id is not None:
                return Enrolled("restarted" if replaced else "started", run_id, replaced)
        else:
            row = await conn.fetchrow(_START_KEYED_HELD, *args, lease.owner, lease.ttl)
            if row is not None:
                held = RunRecord.from_row(row)
                return Enrolled("restarted" if replaced else "started", held.id, replaced, held)
        # A run for the key started meanwhile (another dispatcher, a webhook, the API): its
        # insert committed before ours gave up, so the next round sees it.
    raise EnrollmentContention(f"enrollment key {key!r} kept changing; retry the transaction")


class NewRun(NamedTuple):
    """A run to start with its trigger rows (``docs``: the events it was started by); ``held``:
    inserted held under the batch's lease (an eager start)."""

    workspace_id: UUID
    id: UUID
    workflow_id: UUID
    version: int
    payload: Any
    state: dict[str, Any]
    trigger: dict[str, Any]
    docs: list[dict[str, Any]]
    held: bool = False


# The runs ($9: held by the lease's owner $10 for $11 seconds, row by row what HELD_VALUES
# writes; or ready) and their trigger rows in one statement; the held ones come back.
_START_MANY = """
WITH r AS (
    INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input, state, trigger,
                      conversation, trace_parent, due_at, fencing_token, began_token, lease_owner,
                      lease_expires_at, started_at)
    SELECT ws, id, wf, v, CASE WHEN h THEN 'in_progress' ELSE 'created' END, input, state, trigger,
           trigger -> 'conversation', trigger ->> 'trace_parent',
           CASE WHEN h THEN now() + make_interval(secs => $11::float8) ELSE now() END,
           h::int, CASE WHEN h THEN 1 END, CASE WHEN h THEN $10 END,
           CASE WHEN h THEN now() + make_interval(secs => $11::float8) END, CASE WHEN h THEN now() END
    FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::int[], $5::jsonb[], $6::jsonb[], $7::jsonb[],
                $9::bool[]) AS n(ws, id, wf, v, input, state, trigger, h)
    RETURNING *
), i AS (
    INSERT INTO run_inbox (workspace_id, run_id, kind, payload, consumed_at, consumed_seq)
    SELECT ws, id, 'trigger', doc, now(), 0
    FROM unnest($12::uuid[], $13::uuid[], $8::jsonb[]) AS d(ws, id, doc)
)
SELECT * FROM r WHERE lease_owner IS NOT NULL
"""
# The same, every run ready, and a NOTIFY so that a worker claims them.
_START_MANY_READY = f"""
WITH r AS (
    INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input, state, trigger,
                      conversation, trace_parent, due_at)
    SELECT ws, id, wf, v, 'created', input, state, trigger, trigger -> 'conversation',
           trigger ->> 'trace_parent', now()
    FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::int[], $5::jsonb[], $6::jsonb[], $7::jsonb[])
      AS n(ws, id, wf, v, input, state, trigger)
    RETURNING 1
), i AS (
    INSERT INTO run_inbox (workspace_id, run_id, kind, payload, consumed_at, consumed_seq)
    SELECT ws, id, 'trigger', doc, now(), 0
    FROM unnest($9::uuid[], $10::uuid[], $8::jsonb[]) AS d(ws, id, doc)
)
SELECT pg_notify('{WAKE_CHANNEL}', '') FROM (SELECT count(*) FROM r) AS inserted
"""


async def start_many(conn: Connection, new: list[NewRun], lease: Lease | None = None) -> list[RunRecord]:
    """Start runs that hold no enrollment key (nothing to conflict with), in one statement.

    Returns:
        The runs inserted held under ``lease`` (those marked ``held``), to hand to its worker
        once the caller's transaction committed. The others wait for a claim.
    """
    if not new:
        return []
    docs = [(run, doc) for run in new for doc in run.docs]
    columns = (
        [run.workspace_id for run in new],
        [run.id for run in new],
        [run.workflow_id for run in new],
        [run.version for run in new],
        [run.payload for run in new],
        [run.state for run in new],
        [run.trigger for run in new],
        [doc for _, doc in docs],
    )
    if lease is None or not any(run.held for run in new):
        await conn.execute(
            _START_MANY_READY, *columns, [run.workspace_id for run, _ in docs], [run.id for run, _ in docs]
        )
        return []
    rows = await conn.fetch(
        _START_MANY, *columns, [run.held for run in new], lease.owner, lease.ttl,
        [run.workspace_id for run, _ in docs], [run.id for run, _ in docs],
    )  # fmt: skip
    if not all(run.held for run in new):
        await conn.execute(f"SELECT pg_notify('{WAKE_CHANNEL}', '')")  # the ready ones: claim them
    return [RunRecord.from_row(row) for row in rows]


async def _active_run(conn: Connection, workspace_id: UUID, workflow_id: UUID, key: str) -> UUID | None:
    value: UUID | None = await conn.fetchval(
        "SELECT id FROM runs WHERE workspace_id = $1 AND workflow_id = $2 AND enrollment_key = $3 AND active",
        workspace_id,
        workflow_id,
        key,
    )
    return value


async def _reuse_refused(
    conn: Connection, workspace_id: UUID, workflow_id: UUID, key: str, reuse: str
) -> bool:
    last = await conn.fetchval(
        "SELECT status FROM runs WHERE workspace_id = $1 AND workflow_id = $2 AND enrollment_key = $3"
        " ORDER BY created_at DESC LIMIT 1",
        workspace_id,
        workflow_id,
        key,
    )
    return last is not None and (reuse == "reject" or last == "completed")


async def _enroll(
    conn: Connection, workspace_id: UUID, run_id: UUID, event_docs: list[dict[str, Any]]
) -> bool:
    return await inbox.deliver_all(conn, workspace_id, run_id, "event", event_docs)
