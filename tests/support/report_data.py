"""What agent runs leave behind, written straight into the tables, for impact report tests.

``seed`` builds two agent workflows and a structured one with runs, inbox rows, tasks,
notifications and steps at known ages, plus a second workspace with look-alike data; the
expected figures are spelled out in the tests that use it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from agentflow.engine import DEFAULT_WORKSPACE, Engine

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)

RENEWALS = {
    "name": "renewals",
    "kind": "agent",
    "prompt": "Turn meeting action items into tasks and follow them up.",
    "impact": {"minutes": {"event_analysed": 4, "notification_sent": 1, "plan_generated": 20}},
}
FOLLOWUPS = {"name": "followups", "kind": "agent", "prompt": "Follow up on emails."}
PLAIN = {"name": "plain", "kind": "structured", "nodes": [{"id": "done", "type": "finish"}]}


@dataclass(frozen=True)
class Seeded:
    """Ids of what ``seed`` wrote."""

    renewals: UUID
    followups: UUID
    plain: UUID
    other_workspace: UUID
    runs: dict[str, UUID]


def event(topic: str, account: str | None = None, **data: Any) -> dict[str, Any]:
    """An event document as triggers and inboxes carry it."""
    return {"topic": topic, "message_id": str(uuid.uuid4()), "data": data, "account_id": account,
            "published_at": "2026-01-01T00:00:00+00:00"}  # fmt: skip


async def insert_run(
    engine: Engine,
    workflow_id: UUID,
    *,
    account: str | None,
    age: timedelta,
    trigger: dict[str, Any] | None,
    tokens: tuple[int, int, int] = (0, 0, 0),
    usd: str = "0",
    workspace: UUID = DEFAULT_WORKSPACE,
) -> UUID:
    run_id = uuid.uuid4()
    await engine.db.pool.execute(
        "INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, trigger, account_id,"
        " input_tokens, output_tokens, cached_input_tokens, usd_cost, created_at)"
        " VALUES ($1, $2, $3, 1, 'completed', $4, $5, $6, $7, $8, $9, now() - $10::interval)",
        workspace, run_id, workflow_id, trigger, account, *tokens, Decimal(usd), age,
    )  # fmt: skip
    return run_id


async def insert_inbox(
    engine: Engine, run_id: UUID, kind: str, payload: dict[str, Any], consumed_age: timedelta | None,
    workspace: UUID = DEFAULT_WORKSPACE,
) -> None:  # fmt: skip
    await engine.db.pool.execute(
        "INSERT INTO run_inbox (workspace_id, run_id, kind, payload, consumed_at)"
        " VALUES ($1, $2, $3, $4, now() - $5::interval)",
        workspace, run_id, kind, payload, consumed_age,
    )  # fmt: skip


async def insert_task(
    engine: Engine,
    run_id: UUID | None,
    *,
    age: timedelta,
    account: str | None = None,
    due: timedelta | None = None,
    completed: timedelta | None = None,
    workspace: UUID = DEFAULT_WORKSPACE,
) -> UUID:
    """A task created ``age`` ago, due ``due`` after creation, completed ``completed`` after it."""
    task_id = uuid.uuid4()
    await engine.db.pool.execute(
        "INSERT INTO tasks (workspace_id, id, run_id, title, account_id, created_at, updated_at, due_at,"
        " status, completed_at, system_generated)"
        " VALUES ($1, $2, $3, 'Follow up', $4, now() - $5::interval, now() - $5::interval,"
        " now() - $5::interval + $6::interval, CASE WHEN $7::interval IS NULL THEN 'open' ELSE 'completed' END,"
        " now() - $5::interval + $7::interval, true)",
        workspace, task_id, run_id, account, age, due, completed,
    )  # fmt: skip
    return task_id


async def insert_notification(
    engine: Engine,
    run_id: UUID,
    *,
    status: str = "sent",
    age: timedelta = HOUR,
    account: str | None = None,
    kind: str = "message",
    workspace: UUID = DEFAULT_WORKSPACE,
) -> None:
    await engine.db.pool.execute(
        "INSERT INTO notifications (workspace_id, id, run_id, channel, recipient, body, status, sent_at,"
        " account_id, kind, created_at)"
        " VALUES ($1, gen_random_uuid(), $2, 'email', 'dana@example.com', 'hi', $3,"
        " CASE WHEN $3 = 'sent' THEN now() - $4::interval END, $5, $6, now() - $4::interval)",
        workspace, run_id, status, age, account, kind,
    )  # fmt: skip


async def insert_step(
    engine: Engine,
    run_id: UUID,
    seq: int,
    kind: str,
    *,
    name: str | None = None,
    status: str = "completed",
    age: timedelta = HOUR,
    workspace: UUID = DEFAULT_WORKSPACE,
) -> None:
    await engine.db.pool.execute(
        "INSERT INTO run_steps (workspace_id, run_id, seq, attempt, kind, name, status, idempotency_key,"
        " fencing_token, started_at, finished_at)"
        " VALUES ($1, $2::uuid, $3::int, 1, $4, $5, $6, $2::uuid::text || ':' || $3::int, 1, now() - $7::interval,"
        " now() - $7::interval)",
        workspace, run_id, seq, kind, name, status, age,
    )  # fmt: skip


async def seed(engine: Engine) -> Seeded:
    """Two agent workflows, a structured one and another workspace's look-alikes (see the
    tests for the expected figures)."""
    renewals = (await engine.publish_workflow(RENEWALS)).workflow.id
    followups = (await engine.publish_workflow(FOLLOWUPS)).workflow.id
    plain = (await engine.publish_workflow(PLAIN)).workflow.id
    runs: dict[str, UUID] = {}

    # renewals, run a1 (acme, 2 days ago): a meeting, then an email and another meeting.
    a1 = runs["a1"] = await insert_run(
        engine, renewals, account="acme", age=2 * DAY, trigger={"source": "event", "event": event("meeting.ended", "acme")},
        tokens=(1000, 200, 100), usd="0.0100",
    )  # fmt: skip
    await insert_inbox(engine, a1, "trigger", event("meeting.ended", "acme"), 2 * DAY)  # the trigger again
    await insert_inbox(engine, a1, "event", event("email.received", "acme"), DAY + HOUR)
    await insert_inbox(engine, a1, "event", event("meeting.ended", "acme"), DAY + HOUR)
    await insert_inbox(engine, a1, "task", {"topic": "task.updated"}, None)  # never consumed
    await insert_task(engine, a1, age=2 * DAY, due=DAY, completed=12 * HOUR)  # on time
    await insert_task(engine, a1, age=2 * DAY, due=HOUR, completed=DAY)  # late
    await insert_task(engine, a1, age=2 * DAY, completed=HOUR)  # no due date: on time
    await insert_task(engine, a1, age=2 * DAY, account="globex", due=5 * DAY)  # open
    await insert_notification(engine, a1, age=DAY)
    await insert_notification(engine, a1, age=HOUR, account="acme", kind="task_due_soon")
    await insert_notification(engine, a1, status="pending")
    await insert_notification(engine, a1, status="failed")
    for seq in (1, 3, 5):
        await insert_step(engine, a1, seq, "agent.decide", age=DAY)
    await insert_step(engine, a1, 2, "agent.tool", name="generate_plan", age=DAY)
    await insert_step(engine, a1, 4, "agent.tool", name="generate_plan", status="failed", age=DAY)
    await insert_step(engine, a1, 4, "agent.tool", name="create_task", age=DAY)

    # renewals, run a2 (globex, 1 day ago): a debounce window of three events, two meetings.
    window = [
        event("meeting.ended", "globex"),
        event("meeting.ended", "globex"),
        event("note.added", "globex"),
    ]
    a2 = runs["a2"] = await insert_run(
        engine, renewals, account="globex", age=DAY,
        trigger={"source": "event", "event": window[-1], "debounced": {"key": "globex", "events": window}},
        tokens=(500, 100, 0), usd="0.0050",
    )  # fmt: skip
    await insert_task(engine, a2, age=DAY)
    await insert_notification(engine, a2, age=HOUR)
    await insert_step(engine, a2, 1, "agent.decide", age=HOUR)

    # renewals, run a3 (acme, 40 days ago): outside a 7-day period.
    a3 = runs["a3"] = await insert_run(
        engine, renewals, account="acme", age=40 * DAY, trigger={"source": "event", "event": event("email.x")},
        tokens=(7000, 700, 0), usd="0.0700",
    )  # fmt: skip
    await insert_task(engine, a3, age=40 * DAY, due=DAY, completed=HOUR)
    await insert_notification(engine, a3, age=40 * DAY)
    await insert_step(engine, a3, 1, "agent.decide", age=40 * DAY)

    # followups, run b1 (initech, 3 hours ago), started by hand: no trigger event.
    b1 = runs["b1"] = await insert_run(engine, followups, account="initech", age=3 * HOUR, trigger=None,
                                       tokens=(300, 30, 0), usd="0.0030")  # fmt: skip
    await insert_task(engine, b1, age=2 * HOUR, account="initech")
    await insert_notification(engine, b1, age=HOUR)
    await insert_step(engine, b1, 1, "agent.decide", age=HOUR)

    # The structured workflow's run and things: never in a report.
    p1 = runs["p1"] = await insert_run(engine, plain, account="acme", age=HOUR,
                                       trigger={"event": event("meeting.ended", "acme")}, tokens=(5, 5, 5))  # fmt: skip
    await insert_task(engine, p1, age=HOUR)
    await insert_notification(engine, p1, age=HOUR)

    # Another workspace: the same names, its own runs and things.
    other = uuid.uuid4()
    await engine.db.pool.execute("INSERT INTO workspaces (id, name) VALUES ($1, 'other')", other)
    theirs = (await engine.publish_workflow(RENEWALS, workspace_id=other)).workflow.id
    t1 = runs["t1"] = await insert_run(
        engine, theirs, account="acme", age=HOUR, trigger={"event": event("meeting.ended", "acme")},
        tokens=(11, 11, 0), workspace=other,
    )  # fmt: skip
    await insert_task(engine, t1, age=HOUR, workspace=other)
    await insert_notification(engine, t1, age=HOUR, workspace=other)
    await insert_step(engine, t1, 1, "agent.tool", name="generate_plan", workspace=other)
    return Seeded(renewals, followups, plain, other, runs)
