"""``agentflow demo``: agent workflows end to end, offline, on the embedded database.

A meeting transcript becomes tasks (assignees, due dates, priorities) with an assignment email
and a due-soon reminder (time compressed), completing the tasks re-triggers the run until it
completes; a churn-risk signal gets a get-well plan from the knowledge base and its tasks; an
email about pricing notifies the account owner. Emails go through real SMTP to a local sink
the demo starts. It runs on the scripted model unless ``AGENTFLOW_MODEL`` names a real one.

Everything it writes goes to its own workspace (``agentflow-demo``), never the user's: its
workflows listen to ``meeting.*``, ``email.*`` and ``signal.*``, topics a user's own events
use too. When it ends it cancels what is still active and disables its workflows, so nothing
of it runs later on the user's workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg
import typer
from rich.table import Table

from agentflow.cli.common import console, err_console, run_with_engine, settings_with
from agentflow.cli.render import timeline
from agentflow.core.errors import ConflictError
from agentflow.core.records import RunRecord
from agentflow.core.reports import summary_line
from agentflow.engine import Engine
from agentflow.integrations.smtp_sink import SmtpSink
from agentflow.store.workspace_setup import ensure_workspace

DEMO_WORKSPACE = UUID("00000000-0000-0000-0000-000000000de0")
DEMO_WORKSPACE_NAME = "agentflow-demo"

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
    console.print(f"email: a local SMTP sink at {sink.url}")
    await _own_workspace(engine)
    for account_id, name, owner, attributes in ACCOUNTS:
        await engine.accounts.upsert(
            account_id, name=name, owner=owner, attributes=attributes, workspace_id=DEMO_WORKSPACE
        )
    for config in WORKFLOWS:
        published = await engine.publish_workflow(config, enabled=True, workspace_id=DEMO_WORKSPACE)
        console.print(f"workflow [bold]{config['name']}[/] version {published.version.version}")
    # Each demo stands alone: earlier demo runs are not shown.
    earlier = await _wind_down(engine)
    started_at = await engine.db.pool.fetchval("SELECT now()")
    suffix = uuid.uuid4().hex[:8]
    events = [{**e, "message_id": f"{e['message_id']}-{suffix}"} for e in EVENTS]
    worker = engine.worker(concurrency=8)
    worker_task = asyncio.create_task(worker.run())
    deadline = asyncio.get_running_loop().time() + timeout
    try:
        try:
            await engine.events.publish(events, workspace_id=DEMO_WORKSPACE)
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
    finally:
        # Whatever happened, nothing of the demo may run later on the user's workers.
        await _wind_down(engine, disable=True)
    if not ok:
        raise typer.Exit(1)


async def _own_workspace(engine: Engine) -> None:
    try:
        await ensure_workspace(engine.db.pool, DEMO_WORKSPACE, DEMO_WORKSPACE_NAME)
    except asyncpg.UniqueViolationError:
        err_console.print(
            f"[bold red]error[/] workspace_name_taken: another workspace is named {DEMO_WORKSPACE_NAME!r};"
            " the demo needs that name for its own workspace.",
            soft_wrap=True,
        )
        raise typer.Exit(1) from None
    console.print(
        f"workspace: the demo runs in its own workspace {DEMO_WORKSPACE_NAME!r} ({DEMO_WORKSPACE});"
        " yours is left as it is\n",
        highlight=False,
    )


async def _wind_down(engine: Engine, *, disable: bool = False) -> set[UUID]:
    """Cancel the demo's active runs (and with ``disable``, disable its workflows); return every
    run id the demo workflows have."""
    seen: set[UUID] = set()
    for config in WORKFLOWS:
        for run in await engine.list_runs(workflow=config["name"], limit=1000, workspace_id=DEMO_WORKSPACE):
            seen.add(run.id)
            if not run.status.is_terminal:
                with contextlib.suppress(ConflictError):  # it ended meanwhile
                    await engine.cancel_run(run.id, reason="demo_ended", workspace_id=DEMO_WORKSPACE)
        if disable:
            await engine.set_flags(config["name"], enabled=False, workspace_id=DEMO_WORKSPACE)
    return seen


async def _follow_meeting(engine: Engine, sink: SmtpSink, run: RunRecord, deadline: float) -> None:
    """Complete the meeting's tasks one by one, as the people would; each change wakes the run."""
    run = await _settled(engine, run, deadline)
    tasks = await engine.tasks.list(run_id=run.id, workspace_id=DEMO_WORKSPACE)
    console.print(f"the meeting run created {len(tasks)} tasks and waits for them")
    await _wait_for(functools.partial(_reminders_sent, sink, len(tasks)), deadline)
    for task in tasks:
        before = (await engine.get_run(run.id, workspace_id=DEMO_WORKSPACE)).step_seq
        await engine.tasks.complete(task.id, workspace_id=DEMO_WORKSPACE)
        console.print(f"  completed task “{task.title}” (assigned to {task.assignee})")
        await _wait_for(functools.partial(_moved, engine, run, before), deadline)
        await _settled(engine, run, deadline)


async def _reminders_sent(sink: SmtpSink, tasks: int) -> bool:
    kinds = [m.subject for m in sink.messages]
    return sum("due" in s.lower() for s in kinds) >= tasks or not tasks


async def _moved(engine: Engine, run: RunRecord, seq: int) -> bool:
    now = await engine.get_run(run.id, workspace_id=DEMO_WORKSPACE)
    return now.step_seq > seq and now.status != "in_progress"


async def _run_of(engine: Engine, workflow: str, earlier: set[UUID], deadline: float) -> RunRecord:
    while True:
        found = [
            r
            for r in await engine.list_runs(workflow=workflow, workspace_id=DEMO_WORKSPACE)
            if r.id not in earlier
        ]
        if found:
            return found[-1]
        await _tick(deadline, f"no run of {workflow} started")


async def _settled(engine: Engine, run: RunRecord, deadline: float) -> RunRecord:
    """The run once it rests: finished, suspended, or waiting for something."""
    while True:
        now = await engine.get_run(run.id, workspace_id=DEMO_WORKSPACE)
        if now.status not in ("created", "in_progress"):
            return now
        await _tick(deadline, f"run {run.id} did not settle")


async def _mail_settled(engine: Engine, deadline: float) -> None:
    async def none_pending() -> bool:
        return not await engine.db.pool.fetchval(
            "SELECT count(*) FROM notifications WHERE workspace_id = $1 AND status = 'pending'",
            DEMO_WORKSPACE,
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
        for run in reversed(await engine.list_runs(workflow=config["name"], workspace_id=DEMO_WORKSPACE)):
            if run.id in earlier:
                continue
            results[config["name"]] = run
            console.print(f"[bold]{config['name']}[/] (account {run.account_id})")
            console.print(timeline(run, await engine.list_steps(run.id, workspace_id=DEMO_WORKSPACE)))
            if run.output and run.output.get("summary"):
                console.print(f"  summary: {run.output['summary']}")
            plan = (run.state.get("agent") or {}).get("plan")
            if plan:
                cited = "; ".join(dict.fromkeys(c["title"] for c in plan.get("citations", [])))
                console.print(f"  plan: {len(plan.get('steps', []))} steps, citing {cited}")
            created = await engine.tasks.list(run_id=run.id, workspace_id=DEMO_WORKSPACE)
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
    report = await engine.reports.impact(since=started_at, workspace_id=DEMO_WORKSPACE)
    console.print("\n[bold]What has this agent done for me?[/]")
    console.print(summary_line(report), highlight=False, markup=False)
    if engine.settings.model:
        return all(r.status != "failed" for r in results.values())
    meeting, churn, pricing = (results.get(c["name"]) for c in WORKFLOWS)
    subjects = " ".join(m.subject.lower() for m in sink.messages)
    pricing_runs = [
        r
        for r in await engine.list_runs(workflow=WORKFLOWS[2]["name"], workspace_id=DEMO_WORKSPACE)
        if r.id not in earlier
    ]
    checks = {
        "the meeting run completed": meeting is not None and meeting.status == "completed",
        "the churn run made a plan and tasks": churn is not None
        and bool((churn.state.get("agent") or {}).get("plan"))
        and bool(await engine.tasks.list(run_id=churn.id, workspace_id=DEMO_WORKSPACE)),
        "the pricing email notified the owner": pricing is not None and pricing.status == "completed"
        and "pricing concern" in subjects,
        "assignment and due-soon emails went out": "new task" in subjects and "due soon" in subjects,
        "the gate kept the thank-you email out": len(pricing_runs) == 1,
    }  # fmt: skip
    for check, passed in checks.items():
        console.print(f"{'[green]✓[/]' if passed else '[red]✗[/]'} {check}")
    return all(checks.values())
