"""Named queries of dispatch: listening workflows, start-or-enroll, decisions.

They run on the caller's connection, inside its transaction: the dispatcher's (with its
cursor in the event log), a webhook's (with the event it stored), the scheduler's (a closing
debounce window) or the gatekeeper's (a gate verdict). A decision's runs, inbox rows and
record commit together or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from agentflow.core.records import VersionRecord
from agentflow.store import inbox, runs
from agentflow.store.database import WAKE_CHANNEL, Connection

# A key's active run can end between our look and our insert; a few rounds always settle it.
_ROUNDS = 8


class EnrollmentContention(RuntimeError):
    """The key's active run kept changing under us; the caller's transaction should retry."""


async def listening_workflows(conn: Connection) -> list[VersionRecord]:
    """Latest versions of enabled, non-draft workflows that a topic can start.

    Those that declare a trigger with topics, and agent workflows (their ``sources`` are
    topics too).
    """
    rows = await conn.fetch(
        "SELECT v.* FROM workflows w JOIN workflow_versions v ON v.workspace_id = w.workspace_id"
        " AND v.workflow_id = w.id AND v.version = w.latest_version"
        " WHERE w.enabled AND NOT w.draft"
        " AND (jsonb_array_length(coalesce(v.config #> '{trigger,topics}', '[]')) > 0"
        "      OR jsonb_array_length(coalesce(v.config -> 'sources', '[]')) > 0)"
    )
    return [VersionRecord.from_row(r) for r in rows]


async def decided(conn: Connection, batch: list[tuple[UUID, str, str]]) -> set[tuple[UUID, UUID, str, str]]:
    """(workspace, workflow, topic, message id) of the batch's events already decided: the
    redelivery guard, one query per batch on the decisions' event index."""
    rows = await conn.fetch(
        "SELECT d.workspace_id, d.workflow_id, d.event_topic, d.event_message_id FROM dispatch_decisions d"
        " JOIN unnest($1::uuid[], $2::text[], $3::text[]) AS e(ws, topic, message_id)"
        " ON d.workspace_id = e.ws AND d.event_topic = e.topic AND d.event_message_id = e.message_id",
        [ws for ws, _, _ in batch],
        [topic for _, topic, _ in batch],
        [message_id for _, _, message_id in batch],
    )
    return {(r["workspace_id"], r["workflow_id"], r["event_topic"], r["event_message_id"]) for r in rows}


async def decision_of(
    conn: Connection, workspace_id: UUID, workflow_id: UUID, topic: str, message_id: str
) -> dict[str, Any] | None:
    """The recorded decision for (event, workflow), if any."""
    row = await conn.fetchrow(
        "SELECT decision, enrollment_key, run_id, reason, created_at, decided_at FROM dispatch_decisions"
        " WHERE workspace_id = $1 AND workflow_id = $2 AND event_topic = $3 AND event_message_id = $4",
        workspace_id,
        workflow_id,
        topic,
        message_id,
    )
    return dict(row) if row else None


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
                await runs.cancel(conn, workspace_id, active, "restarted_by_event", release_key=True)
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
        run_id = await conn.fetchval(
            "INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input, state,"
            " enrollment_key, trigger, due_at)"
            " VALUES ($1, gen_random_uuid(), $2, $3, 'created', $4, $5, $6, $7, now())"
            " ON CONFLICT (workspace_id, workflow_id, enrollment_key)"
            " WHERE active AND enrollment_key IS NOT NULL"
            f" DO NOTHING RETURNING id, pg_notify('{WAKE_CHANNEL}', '') IS NULL",
            workspace_id,
            workflow_id,
            version,
            payload,
            state,
            key,
            trigger,
        )
        if run_id is not None:
            await conn.execute(
                "INSERT INTO run_inbox (workspace_id, run_id, kind, payload, consumed_at, consumed_seq)"
                " SELECT $1, $2, 'trigger', doc, now(), 0 FROM unnest($3::jsonb[]) AS doc",
                workspace_id,
                run_id,
                event_docs,
            )
            return Enrolled("restarted" if replaced else "started", run_id, replaced)
        # A run for the key started meanwhile (another dispatcher, a webhook, the API): its
        # insert committed before ours gave up, so the next round sees it.
    raise EnrollmentContention(f"enrollment key {key!r} kept changing; retry the transaction")


@dataclass(frozen=True)
class DecisionRow:
    """What was decided for one (event, workflow) pair, and why."""

    workspace_id: UUID
    workflow_id: UUID
    topic: str
    message_id: str
    decision: str
    key: str | None
    run_id: UUID | None
    reason: Any


async def record_all(conn: Connection, rows: list[DecisionRow]) -> None:
    """Record decisions in one statement (a pair decided before keeps its first decision)."""
    if not rows:
        return
    await conn.execute(
        "INSERT INTO dispatch_decisions (workspace_id, workflow_id, event_topic, event_message_id, decision,"
        " enrollment_key, run_id, reason, decided_at)"
        " SELECT *, now() FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[],"
        " $7::uuid[], $8::jsonb[]) ON CONFLICT DO NOTHING",
        [r.workspace_id for r in rows],
        [r.workflow_id for r in rows],
        [r.topic for r in rows],
        [r.message_id for r in rows],
        [r.decision for r in rows],
        [r.key for r in rows],
        [r.run_id for r in rows],
        [r.reason for r in rows],
    )


async def settle(
    conn: Connection,
    workspace_id: UUID,
    workflow_id: UUID,
    events: list[tuple[str, str]],
    decision: str | None,
    key: str | None,
    run_id: UUID | None,
    reason: Any,
) -> None:
    """Complete pending decisions (``gate_pending``, ``debounced``) once their outcome is known.

    Args:
        events: (topic, message id) of each event concerned.
        decision: the final decision, or None to keep the recorded one (debounced events
            keep ``debounced`` and gain the run they ended in).
        reason: merged into the recorded reason (JSON object), or None.
    """
    await conn.execute(
        "UPDATE dispatch_decisions d SET decision = coalesce($5, d.decision),"
        " enrollment_key = coalesce($6, d.enrollment_key), run_id = $7,"
        " reason = CASE WHEN $8::jsonb IS NULL THEN d.reason"
        "   ELSE coalesce(d.reason, '{}'::jsonb) || $8::jsonb END, decided_at = now()"
        " FROM unnest($3::text[], $4::text[]) AS e(topic, message_id)"
        " WHERE d.workspace_id = $1 AND d.workflow_id = $2"
        " AND d.event_topic = e.topic AND d.event_message_id = e.message_id",
        workspace_id,
        workflow_id,
        [topic for topic, _ in events],
        [message_id for _, message_id in events],
        decision,
        key,
        run_id,
        reason,
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


async def list_decisions(
    conn: Connection, workspace_id: UUID, workflow_id: UUID, *, limit: int, before: int | None
) -> list[dict[str, Any]]:
    """A workflow's decisions, newest first (``before``: an id, for the next page)."""
    rows = await conn.fetch(
        "SELECT id, event_topic, event_message_id, decision, enrollment_key, run_id, reason, created_at,"
        " decided_at FROM dispatch_decisions WHERE workspace_id = $1 AND workflow_id = $2"
        " AND ($4::bigint IS NULL OR id < $4) ORDER BY id DESC LIMIT $3",
        workspace_id,
        workflow_id,
        limit,
        before,
    )
    return [dict(r) for r in rows]


async def prune_decisions(conn: Connection, older_than: float) -> int:
    """Delete decisions (and decided gate requests) made more than ``older_than`` seconds ago,
    keeping those still waiting for a gate verdict or a debounce window; return how many."""
    result = await conn.execute(
        "WITH gone AS (DELETE FROM gate_requests WHERE status = 'decided'"
        "  AND decided_at < now() - make_interval(secs => $1))"
        " DELETE FROM dispatch_decisions WHERE created_at < now() - make_interval(secs => $1)"
        " AND decision <> 'gate_pending' AND NOT (decision = 'debounced' AND run_id IS NULL)",
        older_than,
    )
    return int(result.split()[-1])
