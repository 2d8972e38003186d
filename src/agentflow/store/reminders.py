"""Named queries for task reminders: one set-based ``INSERT ... SELECT`` per kind into the
notifications outbox, each row at most once (``ON CONFLICT (workspace_id, origin_key) DO
NOTHING``).

A scan is either full (every open task) or incremental: only tasks changed since ``since``
(index ``tasks_open_changed``) and tasks whose due date crossed a reminder threshold since
then (index ``tasks_open_due``), so a scan every second costs a few index probes however
many tasks there are. The caller overlaps incremental scans and runs a full one now and then:
a task written by a transaction that committed late is reminded at the next full scan.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from agentflow.core.reminders import EMAIL_ASSIGNEE, WORDING, ReminderKind, ReminderPolicy, hours_text
from agentflow.store.database import Connection

_SCAN_LOCK = 0x72656D696E64  # "remind": one scanner at a time; the others skip their turn

# $1 subject format, $2 body format, $3 window in hours (text), $4 email pattern,
# $5 the window or threshold (seconds), $6 since (incremental scans only).
_INSERT = """
INSERT INTO notifications (workspace_id, id, run_id, origin_key, channel, recipient, subject, body,
                           status, sent_at, kind, task_id, account_id, metadata)
SELECT t.workspace_id, gen_random_uuid(), t.run_id, k.origin_key, d.channel, t.assignee,
       format($1::text, t.title, d.due, d.account, d.priority, $3::text),
       format($2::text, t.title, d.due, d.account, d.priority, $3::text),
       CASE d.channel WHEN 'in_app' THEN 'sent' ELSE 'pending' END,
       CASE d.channel WHEN 'in_app' THEN now() END,
       '{kind}', t.id, t.account_id,
       jsonb_build_object('reminder', '{kind}', 'title', t.title, 'assignee', t.assignee,
                          'due_at', t.due_at, 'priority', t.priority, 'account_name', a.name,
                          'window_seconds', $5::float8)
FROM tasks t
CROSS JOIN LATERAL (SELECT 'task:' || t.id || ':' || {suffix} AS origin_key) k
LEFT JOIN accounts a ON a.workspace_id = t.workspace_id AND a.id = t.account_id
CROSS JOIN LATERAL (
    SELECT CASE WHEN t.assignee ~ $4::text THEN 'email' ELSE 'in_app' END AS channel,
           coalesce(to_char(t.due_at AT TIME ZONE 'UTC', 'FMDay DD Mon YYYY, HH24:MI "UTC"'),
                    'no due date') AS due,
           coalesce(a.name, t.account_id, 'none') AS account,
           coalesce(t.priority, 'not set') AS priority
) d
WHERE t.status IN ('open', 'in_progress') AND t.assignee IS NOT NULL AND {where}
ON CONFLICT (workspace_id, origin_key) DO NOTHING
"""

_EPOCH = "floor(extract(epoch FROM t.due_at))::bigint"
_WINDOW = "make_interval(secs => $5::float8)"
# Per kind: the origin key's suffix, the full scan's condition, and what an incremental scan
# adds (the task changed since $6, or crossed the threshold since $6).
_KINDS: dict[ReminderKind, tuple[str, str, str]] = {
    "task_assigned": (
        "'assigned:' || t.assignee",
        "true",  # every open task with an assignee
        "t.updated_at >= $6::timestamptz",
    ),
    "task_due_soon": (
        f"'due_soon:' || {_EPOCH}",
        f"t.due_at IS NOT NULL AND t.due_at > now() AND t.due_at <= now() + {_WINDOW}",
        f"(t.due_at > $6::timestamptz + {_WINDOW} OR t.updated_at >= $6::timestamptz)",
    ),
    "task_overdue": (
        f"'overdue:' || {_EPOCH}",
        f"t.due_at IS NOT NULL AND t.due_at <= now() - {_WINDOW}",
        f"(t.due_at > $6::timestamptz - {_WINDOW} OR t.updated_at >= $6::timestamptz)",
    ),
}


# A full scan meets mostly reminders written before: the anti-join skips them in one hash
# join, before their text is made. An incremental scan meets few, and the planner misjudges
# its index ranges (bounds from now()), so it leaves them to ON CONFLICT.
_WRITTEN_BEFORE = (
    "NOT EXISTS (SELECT 1 FROM notifications n"
    " WHERE n.workspace_id = t.workspace_id AND n.origin_key = k.origin_key)"
)


def _statement(kind: ReminderKind, incremental: bool) -> str:
    suffix, condition, recent = _KINDS[kind]
    where = f"{condition} AND {recent}" if incremental else f"{condition} AND {_WRITTEN_BEFORE}"
    return _INSERT.format(suffix=suffix, kind=kind, where=where)


_STATEMENTS = {(kind, inc): _statement(kind, inc) for kind in _KINDS for inc in (False, True)}


async def lock_scan(conn: Connection) -> datetime | None:
    """Inside a transaction: take the scan's lock until it ends and return the database time
    (the ``now()`` of every insert in it), or None when another scanner holds the lock."""
    row = await conn.fetchrow("SELECT pg_try_advisory_xact_lock($1) AS locked, now() AS now", _SCAN_LOCK)
    assert row is not None
    return row["now"] if row["locked"] else None


async def insert_reminders(
    conn: Connection,
    kind: ReminderKind,
    policy: ReminderPolicy,
    since: datetime | None = None,
) -> int:
    """Write the ``kind`` reminders due now that are not written yet; return how many.

    Args:
        conn: a connection (inside the scan's transaction).
        kind: ``task_assigned``, ``task_due_soon`` or ``task_overdue``.
        policy: the due-soon window and the overdue threshold.
        since: scan only tasks changed, or crossing the threshold, since this database time
            (None: every open task).
    """
    window = _window(kind, policy)
    if window is None:
        return 0
    wording = WORDING[kind]
    args: list[object] = [wording.subject, wording.body, hours_text(window), EMAIL_ASSIGNEE]
    args.append(window.total_seconds())
    if since is not None:
        args.append(since)
    result = await conn.execute(_STATEMENTS[(kind, since is not None)], *args)
    return int(result.split()[-1])


def _window(kind: ReminderKind, policy: ReminderPolicy) -> timedelta | None:
    if kind == "task_due_soon":
        return policy.due_soon if policy.due_soon > timedelta(0) else None  # zero: never
    if kind == "task_overdue":
        return policy.overdue
    return timedelta(0)
