"""Named queries of dispatch: listening workflows, start-or-enroll (decisions: ``decisions``).

They run on the caller's connection, inside its transaction: the dispatcher's (with its
cursor in the event log), a webhook's (with the event it stored), the scheduler's (a closing
debounce window) or the gatekeeper's (a gate verdict). A decision's runs, inbox rows and
record commit together or not at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple
from uuid import UUID

from agentflow.core.records import VersionRecord
from agentflow.store import inbox, runs
from agentflow.store.database import WAKE_CHANNEL, Connection

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


@dataclass(frozen=True)
class Enrolled:
    """What happened to a matching event: ``started`` a run, ``enrolled`` into one, ..."""

    decision: str
    run_id: UUID | None
    replaced: UUID | None = None  # the run a restart canceled


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
        run_id = await conn.fetchval(
            "WITH r AS (INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input,"
            " state, enrollment_key, trigger, conversation, trace_parent, due_at)"
            " VALUES ($1, gen_random_uuid(), $2, $3, 'created', $4, $5, $6, $7,"
            " $7::jsonb -> 'conversation', $7::jsonb ->> 'trace_parent', now())"
            " ON CONFLICT (workspace_id, workflow_id, enrollment_key)"
            " WHERE active AND enrollment_key IS NOT NULL DO NOTHING RETURNING id),"
            " i AS (INSERT INTO run_inbox (workspace_id, run_id, kind, payload, consumed_at, consumed_seq)"
            " SELECT $1, r.id, 'trigger', doc, now(), 0 FROM r, unnest($8::jsonb[]) AS doc)"
            f" SELECT id, pg_notify('{WAKE_CHANNEL}', '') IS NULL FROM r",
            workspace_id,
            workflow_id,
            version,
            payload,
            state,
            key,
            trigger,
            event_docs,
        )
        if run_id is not None:
            return Enrolled("restarted" if replaced else "started", run_id, replaced)
        # A run for the key started meanwhile (another dispatcher, a webhook, the API): its
        # insert committed before ours gave up, so the next round sees it.
    raise EnrollmentContention(f"enrollment key {key!r} kept changing; retry the transaction")


class NewRun(NamedTuple):
    """A run to start with its trigger rows (``docs``: the events it was started by)."""

    workspace_id: UUID
    id: UUID
    workflow_id: UUID
    version: int
    payload: Any
    state: dict[str, Any]
    trigger: dict[str, Any]
    docs: list[dict[str, Any]]


async def start_many(conn: Connection, new: list[NewRun]) -> None:
    """Start runs that hold no enrollment key (nothing to conflict with), in one statement."""
    if not new:
        return
    docs = [(run, doc) for run in new for doc in run.docs]
    await conn.execute(
        "WITH r AS (INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input,"
        " state, trigger, conversation, trace_parent, due_at)"
        " SELECT ws, id, wf, v, 'created', input, state, trigger, trigger -> 'conversation',"
        " trigger ->> 'trace_parent', now()"
        " FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::int[], $5::jsonb[], $6::jsonb[], $7::jsonb[])"
        "   AS n(ws, id, wf, v, input, state, trigger) RETURNING 1),"
        " i AS (INSERT INTO run_inbox (workspace_id, run_id, kind, payload, consumed_at, consumed_seq)"
        " SELECT ws, id, 'trigger', doc, now(), 0 FROM unnest($8::uuid[], $9::uuid[], $10::jsonb[])"
        "   AS d(ws, id, doc))"
        f" SELECT pg_notify('{WAKE_CHANNEL}', '') FROM (SELECT count(*) FROM r) AS inserted",
        [run.workspace_id for run in new],
        [run.id for run in new],
        [run.workflow_id for run in new],
        [run.version for run in new],
        [run.payload for run in new],
        [run.state for run in new],
        [run.trigger for run in new],
        [run.workspace_id for run, _ in docs],
        [run.id for run, _ in docs],
        [doc for _, doc in docs],
    )


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
