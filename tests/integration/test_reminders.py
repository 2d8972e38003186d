"""Task reminders: assigned, due soon and overdue notifications, each written exactly once."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any
from uuid import UUID

from agentflow.engine import DEFAULT_WORKSPACE, Engine
from agentflow.runtime.reminders import ReminderScanner, scan_reminders
from agentflow.runtime.scheduler import Scheduler


async def insert_task(
    engine: Engine, *, due_in: timedelta | None = None, workspace: UUID = DEFAULT_WORKSPACE, **fields: Any
) -> UUID:
    """A task row, due ``due_in`` from the database's now (None: no due date)."""
    task_id = uuid.uuid4()
    values = {"title": "Send the renewal quote", "assignee": "dana@example.com", **fields}
    names = ", ".join(values)
    marks = ", ".join(f"${i + 4}" for i in range(len(values)))
    await engine.db.pool.execute(
        f"INSERT INTO tasks (workspace_id, id, due_at, {names})"
        f" VALUES ($1, $2, now() + $3::interval, {marks})",
        workspace,
        task_id,
        due_in,
        *values.values(),
    )
    return task_id


async def reminders(engine: Engine, task_id: UUID | None = None) -> list[dict[str, Any]]:
    rows = await engine.db.pool.fetch(
        "SELECT * FROM notifications WHERE ($1::uuid IS NULL OR task_id = $1) ORDER BY created_at, kind",
        task_id,
    )
    return [dict(r) for r in rows]


def kinds(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(r["kind"] for r in rows)


async def test_a_task_due_within_a_day_gets_one_due_soon_reminder(engine: Engine) -> None:
    run_id = uuid.uuid4()
    await engine.accounts.upsert("acme", name="Acme Corp")
    task_id = await insert_task(
        engine, due_in=timedelta(hours=23), run_id=run_id, account_id="acme", priority="high"
    )
    counts = await scan_reminders(engine.db)
    assert (counts.assigned, counts.due_soon, counts.overdue) == (1, 1, 0)
    rows = await reminders(engine, task_id)
    assert kinds(rows) == ["task_assigned", "task_due_soon"]
    due_soon = next(r for r in rows if r["kind"] == "task_due_soon")
    due_at = await engine.db.pool.fetchval("SELECT due_at FROM tasks WHERE id = $1", task_id)
    assert due_soon["origin_key"] == f"task:{task_id}:due_soon:{int(due_at.timestamp())}"
    assert (due_soon["channel"], due_soon["recipient"], due_soon["status"]) == (
        "email",
        "dana@example.com",
        "pending",
    )
    assert (due_soon["run_id"], due_soon["account_id"], due_soon["workspace_id"]) == (
        run_id,
        "acme",
        DEFAULT_WORKSPACE,
    )
    assert due_soon["sent_at"] is None
    assert due_soon["subject"].startswith("Due soon: Send the renewal quote (")
    for text in ("Send the renewal quote", "Acme Corp", "high", "within 24 hours", f"{due_at:%d %b %Y}"):
        assert text in due_soon["body"], text
    assert "http" not in due_soon["body"]
    assert (
        due_soon["metadata"]["reminder"] == "task_due_soon"
        and due_soon["metadata"]["title"] == rows[0]["metadata"]["title"]
    )

    again = await scan_reminders(engine.db)
    assert again.total == 0 and not again.skipped
    assert len(await reminders(engine, task_id)) == 2, "scanning again writes nothing"


async def test_overdue_completed_far_and_unassigned_tasks(engine: Engine) -> None:
    overdue = await insert_task(engine, due_in=timedelta(hours=-25))
    recent = await insert_task(engine, due_in=timedelta(hours=-2))
    far = await insert_task(engine, due_in=timedelta(days=5))
    undated = await insert_task(engine)
    done = await insert_task(engine, due_in=timedelta(hours=23), status="completed")
    canceled = await insert_task(engine, due_in=timedelta(hours=-30), status="canceled")
    nobody = await insert_task(engine, due_in=timedelta(hours=23), assignee=None)
    await scan_reminders(engine.db)
    assert kinds(await reminders(engine, overdue)) == ["task_assigned", "task_overdue"]
    row = next(r for r in await reminders(engine, overdue) if r["kind"] == "task_overdue")
    assert row["subject"].startswith("Overdue: Send the renewal quote (was due ")
    assert "overdue by more than 24 hours" in row["body"] and "Account: none" in row["body"]
    assert kinds(await reminders(engine, recent)) == ["task_assigned"], "overdue by 2 h: not yet"
    assert kinds(await reminders(engine, far)) == ["task_assigned"]
    undated_row = (await reminders(engine, undated))[0]
    assert undated_row["kind"] == "task_assigned" and "Due: no due date" in undated_row["body"]
    for task_id in (done, canceled, nobody):
        assert await reminders(engine, task_id) == []


async def test_reassignment_notifies_the_new_assignee_once(engine: Engine) -> None:
    task_id = await insert_task(engine, due_in=timedelta(hours=10))
    await scan_reminders(engine.db)
    await engine.tasks.update(task_id, {"assignee": "ada@example.com"})
    await scan_reminders(engine.db)
    await scan_reminders(engine.db)
    rows = await reminders(engine, task_id)
    assigned = [r for r in rows if r["kind"] == "task_assigned"]
    assert [(r["recipient"], r["origin_key"]) for r in assigned] == [
        ("dana@example.com", f"task:{task_id}:assigned:dana@example.com"),
        ("ada@example.com", f"task:{task_id}:assigned:ada@example.com"),
    ]
    assert kinds(rows).count("task_due_soon") == 1, "the due-soon reminder is per due date, not per assignee"
    await engine.tasks.update(task_id, {"due_at": "2999-01-01T00:00:00Z"})
    await engine.tasks.update(
        task_id, {"due_at": (await engine.tasks.get(task_id)).created_at + timedelta(hours=3)}
    )
    await scan_reminders(engine.db)
    assert kinds(await reminders(engine, task_id)).count("task_due_soon") == 2, (
        "a new due date, a new reminder"
    )


async def test_an_assignee_without_an_email_address_gets_an_in_app_reminder(engine: Engine) -> None:
    task_id = await insert_task(engine, due_in=timedelta(hours=1), assignee="Dana Scully")
    await scan_reminders(engine.db)
    rows = await reminders(engine, task_id)
    assert {(r["kind"], r["channel"], r["status"]) for r in rows} == {
        ("task_assigned", "in_app", "sent"),
        ("task_due_soon", "in_app", "sent"),
    }
    assert all(r["sent_at"] is not None and r["recipient"] == "Dana Scully" for r in rows)


async def test_reminders_stay_in_their_workspace(engine: Engine) -> None:
    other = uuid.uuid4()
    await engine.db.pool.execute("INSERT INTO workspaces (id, name) VALUES ($1, 'other')", other)
    await engine.accounts.upsert("acme", name="Ours")
    await engine.accounts.upsert("acme", name="Theirs", workspace_id=other)
    mine = await insert_task(engine, due_in=timedelta(hours=5), account_id="acme")
    theirs = await insert_task(engine, due_in=timedelta(hours=5), account_id="acme", workspace=other)
    await scan_reminders(engine.db)
    for task_id, workspace, name in ((mine, DEFAULT_WORKSPACE, "Ours"), (theirs, other, "Theirs")):
        rows = await reminders(engine, task_id)
        assert len(rows) == 2 and {r["workspace_id"] for r in rows} == {workspace}
        assert all(f"Account: {name}" in r["body"] for r in rows), "the account's name from its own workspace"
    listed = await engine.db.pool.fetchval(
        "SELECT count(*) FROM notifications WHERE workspace_id = $1", other
    )
    assert listed == 2


async def test_incremental_scans_look_only_at_recent_changes_and_crossings(engine: Engine) -> None:
    old = "now() - interval '2 days'"
    stale = await insert_task(engine, due_in=timedelta(hours=10))
    crossing = await insert_task(engine, due_in=timedelta(hours=23, minutes=59))
    await engine.db.pool.execute(f"UPDATE tasks SET updated_at = {old}, created_at = {old}")
    since = await engine.db.pool.fetchval("SELECT now() - interval '5 minutes'")
    counts = await scan_reminders(engine.db, since=since)
    assert await reminders(engine, stale) == [], "unchanged and past no threshold since: not looked at"
    assert kinds(await reminders(engine, crossing)) == ["task_due_soon"], "it entered the window since"
    assert (counts.assigned, counts.due_soon) == (0, 1)
    fresh = await insert_task(engine, due_in=timedelta(hours=2))
    await scan_reminders(engine.db, since=since)
    assert kinds(await reminders(engine, fresh)) == ["task_assigned", "task_due_soon"]
    await scan_reminders(engine.db)  # a full scan catches the rest
    assert kinds(await reminders(engine, stale)) == ["task_assigned", "task_due_soon"]


async def test_hours_come_from_settings_or_arguments(engine: Engine) -> None:
    task_id = await insert_task(engine, due_in=timedelta(hours=30))
    assert (await scan_reminders(engine.db, due_soon_hours=0)).due_soon == 0, "zero: no due-soon reminders"
    assert (await scan_reminders(engine.db, due_soon_hours=48)).due_soon == 1
    late = await insert_task(engine, due_in=timedelta(hours=-3))
    assert (await scan_reminders(engine.db, overdue_hours=2)).overdue == 1
    row = next(r for r in await reminders(engine, late) if r["kind"] == "task_overdue")
    assert "more than 2 hours" in row["body"]
    assert kinds(await reminders(engine, task_id)) == ["task_assigned", "task_due_soon"]


async def test_concurrent_scans_write_each_reminder_once(engine: Engine) -> None:
    for n in range(20):
        await insert_task(engine, due_in=timedelta(hours=3 * n - 31), title=f"task {n}")
    results = await asyncio.gather(*[scan_reminders(engine.db) for _ in range(6)])
    assert sum(r.total for r in results) == await engine.db.pool.fetchval(
        "SELECT count(*) FROM notifications"
    )
    duplicates = await engine.db.pool.fetchval(
        "SELECT count(*) FROM (SELECT origin_key FROM notifications GROUP BY 1 HAVING count(*) > 1) d"
    )
    assert duplicates == 0
    await scan_reminders(engine.db)
    # Due -31 h, -28 h, ... 26 h: three overdue by a day or more, eight due within a day.
    counts = dict(await engine.db.pool.fetch("SELECT kind, count(*) FROM notifications GROUP BY kind"))
    assert counts == {"task_assigned": 20, "task_due_soon": 8, "task_overdue": 3}


async def test_the_scheduler_tick_writes_reminders_at_most_once_per_interval(engine: Engine) -> None:
    scheduler = Scheduler(engine.db, poll_interval=60)
    await insert_task(engine, due_in=timedelta(hours=3))
    await scheduler.tick()
    assert kinds(await reminders(engine)) == ["task_assigned", "task_due_soon"]
    await insert_task(engine, due_in=timedelta(hours=3))
    await scheduler.tick()
    assert len(await reminders(engine)) == 2, "within the interval: no scan"
    scanner = ReminderScanner(engine.db, every=0)
    first = await scanner.tick()
    second = await scanner.tick()
    assert first is not None and first.total == 2 and second is not None and second.total == 0
