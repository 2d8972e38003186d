"""Task changes: one transaction, one event, the originating run's inbox, no lost change."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.core.errors import ConfigError, ConflictError, NotFoundError
from agentflow.core.records import RunRecord
from agentflow.core.tasks import TaskRecord
from agentflow.engine import DEFAULT_WORKSPACE, Engine

PLAIN_WAIT = {
    "name": "asks",
    "kind": "structured",
    "nodes": [
        {"id": "ask", "type": "tool", "tool": "make_task", "args": {"title": "Call Acme"}},
        {"id": "nap", "type": "wait", "duration": "1h"},
        {"id": "done", "type": "finish"},
    ],
}


@pytest.fixture
async def run_with_task(engine: Engine) -> tuple[RunRecord, TaskRecord]:
    """A run asleep in a plain wait (so its inbox stays as delivered), and the task it made."""
    await engine.publish_workflow(PLAIN_WAIT)
    run = await engine.start_run("asks")
    worker = engine.worker(concurrency=2, dispatch=False)
    task = asyncio.create_task(worker.run())
    try:
        for _ in range(500):
            if (await engine.get_run(run.id)).status == "waiting":
                break
            await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
    assert (await engine.get_run(run.id)).status == "waiting"
    (made,) = await engine.tasks.list(run_id=run.id)
    return run, made


async def stored_events(engine: Engine) -> list[dict[str, Any]]:
    rows = await engine.db.pool.fetch("SELECT topic, message_id, account_id, data FROM events ORDER BY seq")
    return [dict(r) for r in rows]


async def inbox_of(engine: Engine, run_id: UUID) -> list[dict[str, Any]]:
    rows = await engine.db.pool.fetch(
        "SELECT kind, payload FROM run_inbox WHERE run_id = $1 AND consumed_at IS NULL ORDER BY id", run_id
    )
    return [dict(r) for r in rows]


async def insert_task(engine: Engine, workspace: UUID | None = None, **fields: Any) -> UUID:
    task_id = uuid.uuid4()
    values = {"title": "t", **fields}
    names = ", ".join(values)
    marks = ", ".join(f"${i + 3}" for i in range(len(values)))
    await engine.db.pool.execute(
        f"INSERT INTO tasks (workspace_id, id, {names}) VALUES ($1, $2, {marks})",
        workspace or DEFAULT_WORKSPACE,
        task_id,
        *values.values(),
    )
    return task_id


async def test_a_change_publishes_one_event_and_reaches_the_run(
    engine: Engine, run_with_task: tuple[RunRecord, TaskRecord]
) -> None:
    run, task = run_with_task
    assert task.revision == 0 and task.run_id == run.id and task.system_generated
    update = await engine.tasks.update(task.id, {"assignee": "ada@example.com", "priority": "low"})
    assert update.changes == {
        "assignee": {"old": "owner@example.com", "new": "ada@example.com"},
        "priority": {"old": "high", "new": "low"},
    }
    assert (update.topic, update.message_id, update.delivered) == ("task.updated", f"task:{task.id}:1", True)
    assert update.task.revision == 1 and update.task.assignee == "ada@example.com"

    (event,) = await stored_events(engine)
    assert (event["topic"], event["message_id"]) == ("task.updated", f"task:{task.id}:1")
    assert event["data"]["changes"] == update.changes
    assert event["data"]["run_id"] == str(run.id)
    assert event["data"]["task"]["assignee"] == "ada@example.com" and event["data"]["task"]["revision"] == 1
    (delivered,) = await inbox_of(engine, run.id)
    assert delivered["kind"] == "task"
    assert delivered["payload"]["message_id"] == f"task:{task.id}:1"
    assert delivered["payload"]["data"] == event["data"]

    done = await engine.tasks.complete(task.id)
    assert (done.topic, done.message_id) == ("task.completed", f"task:{task.id}:2")
    assert done.task.status == "completed" and done.task.completed_at is not None
    canceled = await engine.tasks.update(task.id, {"status": "canceled"})
    assert canceled.topic == "task.canceled" and canceled.task.completed_at is None
    assert [e["message_id"] for e in await stored_events(engine)] == [
        f"task:{task.id}:{n}" for n in (1, 2, 3)
    ]
    assert len(await inbox_of(engine, run.id)) == 3
    assert (await engine.get_run(run.id)).status_reason == "timer", "a plain wait is not woken"


async def test_a_change_that_changes_nothing_emits_nothing(
    engine: Engine, run_with_task: tuple[RunRecord, TaskRecord]
) -> None:
    run, task = run_with_task
    for change in ({}, {"assignee": "owner@example.com"}, {"status": "open", "metadata": {}}):
        update = await engine.tasks.update(task.id, change)
        assert update.changes == {} and update.topic is None and not update.delivered
    first = await engine.tasks.complete(task.id)
    again = await engine.tasks.complete(task.id)
    assert first.task.revision == 1 and again.changes == {} and again.task.revision == 1
    assert again.task.completed_at == first.task.completed_at
    assert len(await stored_events(engine)) == 1
    assert len(await inbox_of(engine, run.id)) == 1


async def test_concurrent_changes_are_all_kept(engine: Engine) -> None:
    task_id = await insert_task(engine, metadata={"origin": "crm"})
    n = 12
    updates = await asyncio.gather(
        *(engine.tasks.update(task_id, {"metadata": {f"k{i}": i}}) for i in range(n))
    )
    final = await engine.tasks.get(task_id)
    assert final.revision == n
    assert final.metadata == {"origin": "crm", **{f"k{i}": i for i in range(n)}}, "a change was lost"
    assert sorted(u.task.revision for u in updates) == list(range(1, n + 1))
    ids = [e["message_id"] for e in await stored_events(engine)]
    assert sorted(ids) == sorted(f"task:{task_id}:{r}" for r in range(1, n + 1))


async def test_expected_revision_guards_read_modify_write(engine: Engine) -> None:
    task_id = await insert_task(engine)
    await engine.tasks.update(task_id, {"title": "first", "expected_revision": 0})
    with pytest.raises(ConflictError) as caught:
        await engine.tasks.update(task_id, {"title": "stale", "expected_revision": 0})
    assert caught.value.code == "task_revision_conflict" and caught.value.info.details == {"revision": 1}
    assert (await engine.tasks.get(task_id)).title == "first"
    assert len(await stored_events(engine)) == 1


async def test_fields_clear_and_metadata_merges(engine: Engine) -> None:
    due = datetime(2026, 3, 1, 9, tzinfo=UTC)
    task_id = await insert_task(
        engine, assignee="bo", due_at=due, metadata={"a": 1, "b": 2}, account_id="acme"
    )
    update = await engine.tasks.update(task_id, {"assignee": None, "metadata": {"a": None, "c": 3}})
    assert update.task.assignee is None and update.task.metadata == {"b": 2, "c": 3}
    assert update.changes["assignee"] == {"old": "bo", "new": None}
    later = await engine.tasks.update(task_id, {"due_at": "2026-03-02T10:00:00+01:00"})
    assert later.task.due_at == datetime(2026, 3, 2, 9, tzinfo=UTC)
    assert later.changes["due_at"]["old"] == due.isoformat()
    (_, event) = await stored_events(engine)
    assert event["account_id"] == "acme" and event["data"]["run_id"] is None
    assert not later.delivered, "a task no run created reaches no inbox"


@pytest.mark.parametrize(
    "change",
    [
        {"status": "done"},
        {"title": ""},
        {"title": None},
        {"status": None},
        {"metadata": None},
        {"metadata": "x"},
        {"due_at": "2026-03-01T09:00:00"},
        {"due_at": "tomorrow"},
        {"owner": "me"},
        {"title": "nul \u0000"},
        {"metadata": {"k": "nul \u0000"}},
        {"expected_revision": -1},
        {"priority": "p" * 51},
    ],
)
async def test_invalid_changes_are_refused_and_write_nothing(engine: Engine, change: dict[str, Any]) -> None:
    task_id = await insert_task(engine)
    with pytest.raises(ConfigError) as caught:
        await engine.tasks.update(task_id, change)
    assert caught.value.code == "task_invalid" and caught.value.info.details["errors"]
    assert (await engine.tasks.get(task_id)).revision == 0
    assert await stored_events(engine) == []


async def test_unknown_and_malformed_ids_are_not_found(engine: Engine) -> None:
    for ref in (uuid.uuid4(), "nope", "x" * 1000):
        with pytest.raises(NotFoundError) as caught:
            await engine.tasks.get(ref)
        assert caught.value.code == "task_not_found"
        with pytest.raises(NotFoundError):
            await engine.tasks.complete(ref)


async def test_list_filters_and_pages(engine: Engine) -> None:
    now = datetime.now(UTC)
    soon = await insert_task(engine, title="soon", assignee="ada", due_at=now + timedelta(hours=1))
    late = await insert_task(engine, title="late", assignee="ada", due_at=now + timedelta(days=3))
    other = await insert_task(engine, title="other", assignee="bo", account_id="acme", status="completed")
    undated = await insert_task(engine, title="undated", assignee="ada")
    titles = lambda found: [t.title for t in found]  # noqa: E731
    everything = await engine.tasks.list()
    assert {t.id for t in everything} == {soon, late, other, undated}
    assert titles(await engine.tasks.list(assignee="ada", due_before=now + timedelta(days=1))) == ["soon"]
    assert titles(await engine.tasks.list(due_after=now + timedelta(days=1))) == ["late"]
    assert titles(await engine.tasks.list(status="completed")) == ["other"]
    assert titles(await engine.tasks.list(account_id="acme")) == ["other"]
    assert await engine.tasks.list(run_id=uuid.uuid4()) == []
    first = await engine.tasks.list(limit=3)
    rest = await engine.tasks.list(limit=3, after=first[-1].id)
    assert [t.id for t in first + rest] == [t.id for t in everything] and len(rest) == 1
    with pytest.raises(ConfigError) as caught:
        await engine.tasks.list(status="nope", due_before=datetime(2026, 1, 1), limit=0)
    assert caught.value.code == "task_query_invalid"
    assert {e["path"] for e in caught.value.info.details["errors"]} == {"status", "due_before", "limit"}


async def test_another_workspace_never_sees_or_changes_a_task(engine: Engine) -> None:
    other = uuid.uuid4()
    await engine.db.pool.execute("INSERT INTO workspaces (id, name) VALUES ($1, 'other')", other)
    mine = await insert_task(engine, title="mine")
    theirs = await insert_task(engine, workspace=other, title="theirs")
    assert [t.id for t in await engine.tasks.list(workspace_id=other)] == [theirs]
    with pytest.raises(NotFoundError):
        await engine.tasks.get(mine, workspace_id=other)
    with pytest.raises(NotFoundError):
        await engine.tasks.complete(mine, workspace_id=other)
    assert (await engine.tasks.get(mine)).status == "open"
    update = await engine.tasks.complete(theirs, workspace_id=other)
    assert update.task.workspace_id == other
    workspaces = await engine.db.pool.fetch("SELECT workspace_id FROM events")
    assert [r["workspace_id"] for r in workspaces] == [other]


async def test_a_task_a_step_creates_keeps_its_due_date(engine: Engine) -> None:
    due = "2026-12-01T09:00:00+00:00"
    await engine.publish_workflow(
        {
            "name": "asks-by-friday",
            "kind": "structured",
            "nodes": [
                {"id": "ask", "type": "tool", "tool": "make_task", "args": {"title": "Call", "due": due}}
            ],
        }
    )
    run = await engine.start_run("asks-by-friday")
    await engine.run_worker(until_idle=True)
    assert (await engine.get_run(run.id)).status == "completed"
    stored = await engine.db.pool.fetchval("SELECT due_at FROM tasks WHERE run_id = $1", run.id)
    assert stored == datetime.fromisoformat(due)
