"""Named queries of the dispatcher: listening workflows, start-or-enroll, decisions.

All of them run on the dispatcher's connection, inside the transaction that also moves its
cursor in the event log: a batch's runs, inbox rows and decisions commit with the cursor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from agentflow.core.records import VersionRecord
from agentflow.store import runs
from agentflow.store.database import WAKE_CHANNEL, Connection


async def listening_workflows(conn: Connection) -> list[VersionRecord]:
    """Latest versions of enabled, non-draft workflows that declare a trigger."""
    rows = await conn.fetch(
        "SELECT v.* FROM workflows w JOIN workflow_versions v ON v.workspace_id = w.workspace_id"
        " AND v.workflow_id = w.id AND v.version = w.latest_version"
        " WHERE w.enabled AND NOT w.draft AND v.config ? 'trigger'"
    )
    return [VersionRecord.from_row(r) for r in rows]


async def decided(
    conn: Connection, workspace_id: UUID, topic: str, message_ids: list[str]
) -> set[tuple[UUID, str]]:
    """(workflow, message id) pairs already decided for these events (redelivery guard)."""
    rows = await conn.fetch(
        "SELECT workflow_id, event_message_id FROM dispatch_decisions WHERE workspace_id = $1"
        " AND event_topic = $2 AND event_message_id = ANY($3::text[])",
        workspace_id,
        topic,
        message_ids,
    )
    return {(r["workflow_id"], r["event_message_id"]) for r in rows}


@dataclass(frozen=True)
class Enrolled:
    """What happened to one matching event: ``started`` a run or ``enrolled`` into one."""

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
    event_doc: dict[str, Any],
) -> Enrolled:
    """Start a run for the key, or act on the key's active run as ``mode`` says (G3)."""
    replaced = None
    if mode == "parallel":
        key = None  # runs do not hold the key, so they may overlap
    if key is not None:
        active = await _active_run(conn, workspace_id, workflow_id, key)
        if active is not None and mode == "skip":
            return Enrolled("skipped", active)
        if active is not None and mode == "restart":
            await runs.cancel(conn, workspace_id, active, "restarted_by_event", release_key=True)
            replaced = active
        elif active is not None:
            return await _enroll(conn, workspace_id, active, event_doc)
        if reuse != "allow":
            last = await conn.fetchval(
                "SELECT status FROM runs WHERE workspace_id = $1 AND workflow_id = $2 AND enrollment_key = $3"
                " ORDER BY created_at DESC LIMIT 1",
                workspace_id,
                workflow_id,
                key,
            )
            if last is not None and (reuse == "reject" or last == "completed"):
                return Enrolled("reuse_rejected", None)
    run_id = await conn.fetchval(
        "INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input, state,"
        " enrollment_key, due_at) VALUES ($1, gen_random_uuid(), $2, $3, 'created', $4, $5, $6, now())"
        " ON CONFLICT (workspace_id, workflow_id, enrollment_key) WHERE active AND enrollment_key IS NOT NULL"
        f" DO NOTHING RETURNING id, pg_notify('{WAKE_CHANNEL}', '') IS NULL",
        workspace_id,
        workflow_id,
        version,
        payload,
        state,
        key,
    )
    if run_id is None:  # a run for the key started meanwhile (e.g. through the API)
        assert key is not None
        active = await _active_run(conn, workspace_id, workflow_id, key)
        assert active is not None
        return await _enroll(conn, workspace_id, active, event_doc)
    await conn.execute(
        "INSERT INTO run_inbox (workspace_id, run_id, kind, payload, consumed_at, consumed_seq)"
        " VALUES ($1, $2, 'trigger', $3, now(), 0)",
        workspace_id,
        run_id,
        event_doc,
    )
    return Enrolled("restarted" if replaced else "started", run_id, replaced)


async def record(
    conn: Connection,
    workspace_id: UUID,
    workflow_id: UUID,
    event_doc: dict[str, Any],
    decision: str,
    key: str | None,
    run_id: UUID | None,
    reason: Any,
) -> None:
    """Record what was decided for (event, workflow), and why."""
    await conn.execute(
        "INSERT INTO dispatch_decisions (workspace_id, workflow_id, event_topic, event_message_id, decision,"
        " enrollment_key, run_id, reason) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
        workspace_id,
        workflow_id,
        event_doc["topic"],
        event_doc["message_id"],
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


async def _enroll(conn: Connection, workspace_id: UUID, run_id: UUID, event_doc: dict[str, Any]) -> Enrolled:
    await conn.execute(
        "INSERT INTO run_inbox (workspace_id, run_id, kind, payload) VALUES ($1, $2, 'event', $3)",
        workspace_id,
        run_id,
        event_doc,
    )
    return Enrolled("enrolled", run_id)
