"""Named queries for tasks: read them, and change one (with its event and inbox delivery).

Steps create tasks inside their checkpoints (``store.runs``). A change is one transaction:
the task's row is locked, the change applied and its ``revision`` bumped, the change event
published into the event log, and, for a task a run created, the same event delivered to
that run's inbox. All of it commits or none of it does; concurrent changes queue on the row
lock, so each sees the one before it and none is lost.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core import tasks as core_tasks
from agentflow.core.tasks import TaskChange, TaskQuery, TaskRecord, TaskUpdate
from agentflow.core.triggers import event_document
from agentflow.store import events, inbox


async def get(pool: asyncpg.Pool, workspace_id: UUID, task_id: UUID) -> TaskRecord | None:
    """One task."""
    row = await pool.fetchrow(
        "SELECT * FROM tasks WHERE workspace_id = $1 AND id = $2", workspace_id, task_id
    )
    return TaskRecord.from_row(row) if row else None


async def list_tasks(
    pool: asyncpg.Pool, workspace_id: UUID, query: TaskQuery | None = None, **filters: Any
) -> list[TaskRecord]:
    """Tasks matching ``query`` (or the same filters as keywords), oldest first.

    The order (creation time, then id) is total, so ``after`` pages through without gaps or
    repeats.
    """
    q = query or TaskQuery(**filters)
    rows = await pool.fetch(
        "SELECT * FROM tasks WHERE workspace_id = $1"
        " AND ($2::uuid IS NULL OR run_id = $2)"
        " AND ($3::text IS NULL OR status = $3)"
        " AND ($4::text IS NULL OR assignee = $4)"
        " AND ($5::text IS NULL OR account_id = $5)"
        " AND ($6::timestamptz IS NULL OR due_at < $6)"
        " AND ($7::timestamptz IS NULL OR due_at > $7)"
        " AND ($9::uuid IS NULL OR (created_at, id) >"
        "      (SELECT created_at, id FROM tasks WHERE workspace_id = $1 AND id = $9))"
        " ORDER BY created_at, id LIMIT $8",
        workspace_id, q.run_id, q.status, q.assignee, q.account_id, q.due_before, q.due_after,
        q.limit, q.after,
    )  # fmt: skip
    return [TaskRecord.from_row(r) for r in rows]


# The editable fields in core.tasks.EDITABLE order, then what a change implies.
_UPDATE = """
UPDATE tasks SET
    title = $3, description = $4, assignee = $5, due_at = $6, priority = $7, status = $8,
    metadata = $9,
    completed_at = CASE WHEN $8 = 'completed' THEN coalesce(completed_at, now()) END,
    revision = revision + 1,
    updated_at = now()
WHERE workspace_id = $1 AND id = $2
RETURNING *
"""


async def update(
    pool: asyncpg.Pool, workspace_id: UUID, task_id: UUID, change: TaskChange
) -> TaskUpdate | None:
    """Apply ``change`` to a task in one transaction; None when there is no such task.

    A change that changes nothing writes and publishes nothing.

    Raises:
        ConflictError: ``task_revision_conflict`` (nothing written).
    """
    async with pool.acquire() as conn, conn.transaction():
        # The row lock queues concurrent changes: each applies to the task as the one before
        # it left it, and gets the next revision.
        row = await conn.fetchrow(
            "SELECT * FROM tasks WHERE workspace_id = $1 AND id = $2 FOR NO KEY UPDATE", workspace_id, task_id
        )
        if row is None:
            return None
        applied = core_tasks.apply_change(dict(row), change)
        if not applied.changes:
            return TaskUpdate(TaskRecord.from_row(row), {})
        values = [applied.values[name] for name in core_tasks.EDITABLE]  # $3..$9, in this order
        updated = TaskRecord.from_row(await conn.fetchrow(_UPDATE, workspace_id, task_id, *values))
        topic = core_tasks.event_topic(applied.changes)
        message_id = core_tasks.event_message_id(updated.id, updated.revision)
        new = events.NewEvent(
            topic=topic,
            message_id=message_id,
            data=core_tasks.event_data(updated, applied.changes),
            published_at=None,
            account_id=updated.account_id,
        )
        (published,) = await events.publish(conn, workspace_id, [new])
        delivered = False
        if updated.run_id is not None:
            delivered = await inbox.deliver(
                conn, workspace_id, updated.run_id, "task", event_document(published.event)
            )
        return TaskUpdate(updated, applied.changes, topic, message_id, delivered)
