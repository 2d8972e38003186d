"""Dispatch decisions: what each event did at each listening workflow, and why.

A decision other than ``not_matched`` is one row of ``dispatch_decisions`` per (event,
workflow). The events the dispatcher found a workflow's conditions turn down are a *miss*
instead: one row of ``dispatch_misses`` per event for all such workflows, without the
explanation (worked out again when read: ``agentflow.eventlog``). With 100 listening
workflows that is one row per event instead of 99 rows and explanations (issue 17). Misses
take their ids from the decisions' sequence, so a workflow's decisions and misses page
together, newest first, as one list.

Everything runs on the caller's connection, inside its transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from agentflow.core.frozen import frozen
from agentflow.store.database import Connection


async def decided(conn: Connection, batch: list[tuple[UUID, str, str]]) -> set[tuple[UUID, UUID, str, str]]:
    """(workspace, workflow, topic, message id) of the batch's events already decided or
    missed: the redelivery guard, one query per batch on the events' indexes."""
    rows = await conn.fetch(
        "WITH e AS (SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[]) AS e(ws, topic, message_id))"
        " SELECT d.workspace_id, d.workflow_id, d.event_topic, d.event_message_id FROM dispatch_decisions d"
        " JOIN e ON d.workspace_id = e.ws AND d.event_topic = e.topic AND d.event_message_id = e.message_id"
        " UNION ALL"
        " SELECT m.workspace_id, unnest(m.workflow_ids), m.event_topic, m.event_message_id"
        " FROM dispatch_misses m"
        " JOIN e ON m.workspace_id = e.ws AND m.event_topic = e.topic AND m.event_message_id = e.message_id",
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


@frozen
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


@frozen
class Misses:
    """The workflows whose conditions one event did not meet, as (workflow, the version that
    decided) in the order they were decided."""

    workspace_id: UUID
    topic: str
    message_id: str
    workflows: list[tuple[UUID, int]]


async def record_all(conn: Connection, entries: Sequence[DecisionRow | Misses]) -> None:
    """Record decisions, and misses as one row per event, with ids in the order of ``entries``
    (a pair or event recorded before keeps its first record).

    An event's miss row takes the id of its first ``Misses`` in ``entries`` (an event's
    ``Misses`` met again add their workflows to it). When both kinds are there, the ids are
    drawn first (one query), so that the newest-first listing keeps the order events were
    decided in.
    """
    rows = [e for e in entries if isinstance(e, DecisionRow)]
    events: dict[tuple[UUID, str, str], list[tuple[UUID, int]]] = {}  # in first-seen order
    for entry in entries:
        if isinstance(entry, Misses):
            events.setdefault((entry.workspace_id, entry.topic, entry.message_id), []).extend(entry.workflows)
    row_ids: list[int | None] = [None] * len(rows)  # None: drawn by the insert
    event_ids: list[int | None] = [None] * len(events)
    if rows and events:
        order = list(events)
        firsts: dict[tuple[UUID, str, str], int] = {}
        slots: list[tuple[str, int]] = []
        for entry in entries:
            if isinstance(entry, DecisionRow):
                slots.append(("row", len(slots)))
            elif (key := (entry.workspace_id, entry.topic, entry.message_id)) not in firsts:
                firsts[key] = len(slots)
                slots.append(("event", len(slots)))
        drawn = await conn.fetch(
            "SELECT nextval('dispatch_decisions_id_seq') AS id FROM generate_series(1, $1)", len(slots)
        )
        ids = sorted(r["id"] for r in drawn)
        row_ids = [ids[at] for kind, at in slots if kind == "row"]
        event_ids = [ids[firsts[key]] for key in order]
    if rows:
        await _insert_decisions(conn, rows, row_ids)
    if events:
        await _insert_misses(conn, events, event_ids)


async def _insert_decisions(conn: Connection, rows: list[DecisionRow], ids: list[int | None]) -> None:
    await conn.execute(
        "INSERT INTO dispatch_decisions (id, workspace_id, workflow_id, event_topic, event_message_id,"
        " decision, enrollment_key, run_id, reason, decided_at) OVERRIDING SYSTEM VALUE"
        " SELECT coalesce(id, nextval('dispatch_decisions_id_seq')), ws, wf, topic, message_id, decision,"
        " key, run_id, reason, now()"
        " FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[],"
        " $7::uuid[], $8::jsonb[], $9::bigint[])"
        "   AS d(ws, wf, topic, message_id, decision, key, run_id, reason, id)"
        " ON CONFLICT DO NOTHING",
        [r.workspace_id for r in rows],
        [r.workflow_id for r in rows],
        [r.topic for r in rows],
        [r.message_id for r in rows],
        [r.decision for r in rows],
        [r.key for r in rows],
        [r.run_id for r in rows],
        [r.reason for r in rows],
        ids,
    )


async def _insert_misses(
    conn: Connection, events: dict[tuple[UUID, str, str], list[tuple[UUID, int]]], ids: list[int | None]
) -> None:
    # Each event's workflows are a slice of two flat arrays (a parameter cannot be an array of
    # arrays of different lengths); grouping here costs a fraction of grouping in SQL.
    workflow_ids = [workflow for misses in events.values() for workflow, _ in misses]
    versions = [version for misses in events.values() for _, version in misses]
    bounds, at = [], 1
    for misses in events.values():
        bounds.append((at, at + len(misses) - 1))
        at += len(misses)
    await conn.execute(
        "INSERT INTO dispatch_misses"
        " (id, workspace_id, event_topic, event_message_id, workflow_ids, versions)"
        " SELECT coalesce(id, nextval('dispatch_decisions_id_seq')), ws, topic, message_id,"
        " ($6::uuid[])[lo:hi], ($7::int[])[lo:hi]"
        " FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int[], $5::int[], $8::bigint[])"
        "   WITH ORDINALITY AS e(ws, topic, message_id, lo, hi, id, n)"
        " ORDER BY n ON CONFLICT DO NOTHING",
        [ws for ws, _, _ in events],
        [topic for _, topic, _ in events],
        [message_id for _, _, message_id in events],
        [lo for lo, _ in bounds],
        [hi for _, hi in bounds],
        workflow_ids,
        versions,
        ids,
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


async def list_decisions(
    conn: Connection, workspace_id: UUID, workflow_id: UUID, *, limit: int, before: int | None
) -> list[dict[str, Any]]:
    """A workflow's decisions and misses, newest first (``before``: an id, for the next page).

    A miss comes back as a ``not_matched`` decision without its ``reason`` and with the
    ``version`` that decided it, for the caller to explain.
    """
    rows = await conn.fetch(
        "(SELECT id, event_topic, event_message_id, decision, enrollment_key, run_id, reason, created_at,"
        "  decided_at, NULL::int AS version FROM dispatch_decisions"
        "  WHERE workspace_id = $1 AND workflow_id = $2"
        "  AND ($4::bigint IS NULL OR id < $4) ORDER BY id DESC LIMIT $3)"
        " UNION ALL"
        " (SELECT id, event_topic, event_message_id, 'not_matched', NULL, NULL, NULL, created_at, created_at,"
        "  versions[array_position(workflow_ids, $2)] FROM dispatch_misses"
        "  WHERE workspace_id = $1 AND workflow_ids @> ARRAY[$2::uuid]"
        "  AND ($4::bigint IS NULL OR id < $4) ORDER BY id DESC LIMIT $3)"
        " ORDER BY id DESC LIMIT $3",
        workspace_id,
        workflow_id,
        limit,
        before,
    )
    return [dict(r) for r in rows]


async def prune_decisions(conn: Connection, older_than: float) -> int:
    """Delete decisions and misses (and decided gate requests) made more than ``older_than``
    seconds ago, keeping decisions still waiting for a gate verdict or a debounce window;
    return how many decisions and misses."""
    row = await conn.fetchrow(
        "WITH gone AS (DELETE FROM gate_requests WHERE status = 'decided'"
        "  AND decided_at < now() - make_interval(secs => $1)),"
        " decisions AS (DELETE FROM dispatch_decisions WHERE created_at < now() - make_interval(secs => $1)"
        "  AND decision <> 'gate_pending' AND NOT (decision = 'debounced' AND run_id IS NULL) RETURNING 1),"
        " misses AS (DELETE FROM dispatch_misses"
        "  WHERE created_at < now() - make_interval(secs => $1) RETURNING 1)"
        " SELECT (SELECT count(*) FROM decisions) + (SELECT count(*) FROM misses) AS n",
        older_than,
    )
    assert row is not None
    return int(row["n"])
