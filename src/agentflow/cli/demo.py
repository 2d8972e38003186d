"""``agentflow demo``: agent workflows end to end, offline, on the embedded database.

A meeting transcript becomes tasks (assignees, due dates, priorities) with an assignment email
and a due-soon reminder (time compressed), completing the tasks re-triggers the run until it
completes; a churn-risk signal gets a get-well plan from the knowledge base and its tasks; an
email about pricing notifies the account owner. Emails go through real SMTP to a local sink
the demo starts. It runs on the scripted model unless ``AGENTFLOW_MODEL`` names a real one.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from datetime import datetime
from typing import Any
from uuid import UUID

import typer
from rich.table import Table

from agentflow.cli.common import console, run_with_engine, settings_with
from agentflow.cli.render import timeline
from agentflow.core.records import RunRecord
from agentflow.core.reports import summary_line
from agentflow.engine import Engine
from agentflow.integrations.smtp_sink import SmtpSink

ACTIONS = {
    "create_tasks": {"enabled": True, "expiry": "14d"},
    "send_notifications": {"enabled": True},
    "follow_ups": {"enabled": True},
}
WORKFLOWS: list[dict[str, Any]] = [
    {
        "name": "demo-meeting-follow-up",
        "kind": "agent",
        "prompt": "After each customer meeting, turn its action items into tasks for the right people "
        "and follow them up until they are done.",
        "sources": [{"type": "meeting"}],
        "actions": ACTIONS,
        "budget": {"max_model_calls": 12, "max_usd": 0.5},
    },
    {
        "name": "demo-get-well",
        "kind": "agent",
        "type": "account",
        "prompt": "Start a get-well plan for customers predicted to churn.",
        "sources": [{"type": "signal"}],
        "actions": ACTIONS,
        "budget": {"max_model_calls": 8, "max_usd": 0.5},
    },
    {
        "name": "demo-pricing-watch",
        "kind": "agent",
        "prompt": "Tell the account owner when a customer raises concerns about pricing.",
        "sources": [{"type": "email"}],
        "actions": {"send_notifications": {"enabled": True}},
        "gate": {"instructions": "Only emails that discuss price, cost or discounts."},
        "budget": {"max_model_calls": 4, "max_usd": 0.2},
    },
]
ACCOUNTS = [
    (
        "acme",
        "Acme Corp",
        "dana@vendor.example",
        {"plan": "enterprise", "renewal": "in 60 days", "seats": 250},
    ),
    ("globex", "Globex", "sam@vendor.example", {"plan": "growth", "health_score": 38, "seats": 40}),
]
TRANSCRIPT = """Acme weekly sync. Attendees: Dana (CSM), Lee (SE), Priya (Acme IT).
Priya: the EU rollout is blocked until SSO works.
Action item: Send the SSO setup guide to Priya; owner: lee@vendor.example; due: 2d; priority: high
Action item: Book the executive business review; owner: dana@vendor.example; due: 3d; priority: medium
Dana: we will check in next week.
"""
EVENTS: list[dict[str, Any]] = [
    {"topic": "meeting.completed", "message_id": "demo-meeting-1", "account_id": "acme",
     "data": {"title": "Acme weekly sync", "transcript": TRANSCRIPT}},
    {"topic": "signal.health_score", "message_id": "demo-signal-1", "account_id": "globex",
     "data": {"score": 38, "previous": 71, "prediction": "churn risk: high",
              "reason": "logins fell 60% in 30 days"}},
    {"topic": "email.received", "message_id": "demo-email-1", "account_id": "acme",
     "data": {"from": "cfo@acme.example", "subject": "Renewal pricing",
              "body": "The new pricing is 30% above our budget. Is there a discount for a 3-year term?"}},
    {"topic": "email.received", "message_id": "demo-email-2", "account_id": "acme",
     "data": {"from": "priya@acme.example", "subject": "Thanks",
              "body": "Great session yesterday, thank you!"}},
]  # fmt: skip


def demo(
    timeout: float = typer.Option(90.0, help="Give up after this many seconds."),
) -> None:
    """Run the agent demo end to end: a local SMTP sink, three agent workflows, four events."""
    with SmtpSink() as sink:
        # Reminders are time-compressed: a task due within 4 days counts as "due soon".
        settings = settings_with().model_copy(
            update={
                "smtp_url": sink.url,
                "smtp_from": "agentflow@vendor.example",
                "reminder_due_soon_hours": 96.0,
            }
        )
        run_with_engine(lambda engine: _demo(engine, sink, timeout), settings=settings)


async def _demo(engine: Engine, sink: SmtpSink, timeout: float) -> None:
    where = (
        engine.settings.database_url and "your database"
    ) or f"embedded PostgreSQL in {engine.settings.data_dir}"
    model = engine.settings.model
    console.print(f"[bold]agentflow demo[/] on {where}")
    console.print(
        f"model: {model}"
        if model
        else "model: the scripted provider (no model configured; set AGENTFLOW_MODEL=openai:gpt-4o-mini, ...)"
    )
    console.print(f"email: a local SMTP sink at {sink.url}\n")
    for account_id, name, owner, attributes in ACCOUNTS:
        await engine.accounts.upsert(account_id, name=name, owner=owner, attributes=attributes)
    for config in WORKFLOWS:
        published = await engine.publish_workflow(config)
        console.print(f"workflow [bold]{config['name']}[/] version {published.version.version}")
    # Each demo stands alone: earlier demo runs on this database are canceled and not shown.
    earlier: set[UUID] = set()
    for config in WORKFLOWS:
        for old in await engine.list_runs(workflow=config["name"], limit=500):
            earlier.add(old.id)
            if not old.status.is_terminal:
                await engine.cancel_run(old.id)
    started_at = await engine.db.pool.fetchval("SELECT now()")
    suffix = uuid.uuid4().hex[:8]
    events = [{**e, "message_id": f"{e['message_id']}-{suffix}"} for e in EVENTS]
    worker = engine.worker(concurrency=8)
    worker_task = asyncio.create_task(worker.run())
    deadline = asyncio.get_running_loop().time() + timeout
    try:
        await engine.events.publish(events)
        console.print(f"published {len(EVENTS)} events: a meeting, a churn signal, two emails\n")
        meeting = await _run_of(engine, "demo-meeting-follow-up", earlier, deadline)
        await _follow_meeting(engine, sink, meeting, deadline)
        for name in ("demo-get-well", "demo-pricing-watch"):
            run = await _run_of(engine, name, earlier, deadline)
            await _settled(engine, run, deadline)
        await _mail_settled(engine, deadline)
    finally:
        worker.stop()
        await worker_task
    ok = await _show(engine, sink, earlier, started_at)
    if not ok:
        raise typer.Exit(1)


async def _follow_meeting(engine: Engine, sink: SmtpSink, run: RunRecord, deadline: float) -> None:
    """Complete the meeting's tasks one by one, as the people would; each change wakes the run."""
    run = await _settled(engine, run, deadline)
    tasks = await engine.tasks.list(run_id=run.id)
    console.print(f"the meeting run created {len(tasks)} tasks and waits for them")
    await _wait_for(functools.partial(_reminders_sent, sink, len(tasks)), deadline)
    for task in tasks:
        before = (await engine.get_run(run.id)).step_seq
        await engine.tasks.complete(task.id)
        console.print(f"  completed task “{task.title}” (assigned to {task.assignee})")
        await _wait_for(functools.partial(_moved, engine, run, before), deadline)
        await _settled(engine, run, deadline)


async def _reminders_sent(sink: SmtpSink, tasks: int) -> bool:
    kinds = [m.subject for m in sink.messages]
    return sum("due" in s.lower() for s in kinds) >= tasks or not tasks


async def _moved(engine: Engine, run: RunRecord, seq: int) -> bool:
    now = await engine.get_run(run.id)
    return now.step_seq > seq and now.status != "in_progress"


async def _run_of(engine: Engine, workflow: str, earlier: set[UUID], deadline: float) -> RunRecord:
    while True:
        found = [r for r in await engine.list_runs(workflow=workflow) if r.id not in earlier]
        if found:
            return found[-1]
        await _tick(deadline, f"no run of {workflow} started")


async def _settled(engine: Engine, run: RunRecord, deadline: float) -> RunRecord:
    """The run once it rests: finished, suspended, or waiting for something."""
    while True:
        now = await engine.get_run(run.id)
        if now.status not in ("created", "in_progress"):
            return now
        await _tick(deadline, f"run {run.id} did not settle")


async def _mail_settled(engine: Engine, deadline: float) -> None:
    async def none_pending() -> bool:
        return not await engine.db.pool.fetchval(
            "SELECT count(*) FROM notifications WHERE status = 'pending'"
        )

    await _wait_for(none_pending, deadline)


async def _wait_for(check: Any, deadline: float) -> None:
    while not await check():
        await _tick(deadline, "the demo took too long")


async def _tick(deadline: float, problem: str) -> None:
    if asyncio.get_running_loop().time() > deadline:
        console.print(f"[red]{problem}[/]")
        raise typer.Exit(1)
    await asyncio.sleep(0.1)


async def _show(engine: Engine, sink: SmtpSink, earlier: set[UUID], started_at: datetime) -> bool:
    console.print()
    results: dict[str, RunRecord] = {}
    for config in WORKFLOWS:
        for run in reversed(await engine.list_runs(workflow=config["name"])):
            if run.id in earlier:
                continue
            results[config["name"]] = run
            console.print(f"[bold]{config['name']}[/] (account {run.account_id})")
            console.print(timeline(run, await engine.list_steps(run.id)))
            if run.output and run.output.get("summary"):
                console.print(f"  summary: {run.output['summary']}")
            plan = (run.state.get("agent") or {}).get("plan")
            if plan:
                cited = "; ".join(dict.fromkeys(c["title"] for c in plan.get("citations", [])))
                console.print(f"  plan: {len(plan.get('steps', []))} steps, citing {cited}")
            created = await engine.tasks.list(run_id=run.id)
            if created:
                table = Table(
                    "task", "assignee", "priority", "due", "status", title="  tasks", title_justify="left"
                )
                for t in created:
                    due = f"{t.due_at:%Y-%m-%d}" if t.due_at else "-"
                    table.add_row(t.title, t.assignee or "-", t.priority or "-", due, t.status)
                console.print(table)
            console.print()
    mail = Table("to", "subject", title="emails the SMTP sink received", title_justify="left")
    for m in sink.messages:
        mail.add_row(", ".join(m.rcpt_tos), m.subject)
    console.print(mail)
    report = await engine.reports.impact(since=started_at)
    console.print("\n[bold]What has this agent done for me?[/]")
    console.print(summary_line(report), highlight=False, markup=False)
    if engine.settings.model:
        return all(r.status != "failed" for r in results.values())
    meeting, churn, pricing = (results.get(c["name"]) for c in WORKFLOWS)
    subjects = " ".join(m.subject.lower() for m in sink.messages)
    pricing_runs = [r for r in await engine.list_runs(workflow=WORKFLOWS[2]["name"]) if r.id not in earlier]
    checks = {
        "the meeting run completed": meeting is not None and meeting.status == "completed",
        "the churn run made a plan and tasks": churn is not None
        and bool((churn.state.get("agent") or {}).get("plan"))
        and bool(await engine.tasks.list(run_id=churn.id)),
        "the pricing email notified the owner": pricing is not None and pricing.status == "completed"
        and "pricing concern" in subjects,
        "assignment and due-soon emails went out": "new task" in subjects and "due soon" in subjects,
        "the gate kept the thank-you email out": len(pricing_runs) == 1,
    }  # fmt: skip
    for check, passed in checks.items():
        console.print(f"{'[green]✓[/]' if passed else '[red]✗[/]'} {check}")
    return all(checks.values())
