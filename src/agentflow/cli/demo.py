"""``agentflow demo``: workflows with tools, an engine-table write, a durable wait and a
retry, run end to end on the embedded database, with each run's step timeline.

The agent issue replaces this with the LLM-planned meeting-to-tasks demo.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn
from rich.table import Table

import agentflow
from agentflow import StepContext
from agentflow.cli.common import console, run_with_engine
from agentflow.cli.render import timeline
from agentflow.core.records import RunRecord
from agentflow.engine import Engine

MEETING_FOLLOW_UP: dict[str, Any] = {
    "name": "demo-meeting-follow-up",
    "kind": "structured",
    "description": "Turn a meeting transcript into follow-up tasks, then check on them later.",
    "nodes": [
        {"id": "extract", "type": "tool", "tool": "demo_extract_action_items",
         "args": {"transcript": "{{ payload.transcript }}"}},
        {"id": "tasks", "type": "tool", "tool": "demo_create_tasks",
         "args": {"account": "{{ payload.account }}", "items": "{{ steps.extract.items }}"}},
        {"id": "later", "type": "wait", "duration": "2s", "name": "a day later (compressed)"},
        {"id": "check", "type": "tool", "tool": "demo_check_in",
         "args": {"account": "{{ payload.account }}", "created": "{{ steps.tasks.created }}"}},
        {"id": "done", "type": "finish",
         "output": {"account": "{{ payload.account }}", "tasks": "{{ steps.tasks.created }}",
                    "summary": "{{ steps.check.summary }}"}},
    ],
}  # fmt: skip

CRM_SYNC: dict[str, Any] = {
    "name": "demo-crm-sync",
    "kind": "structured",
    "description": "Push an account update to a flaky CRM: fails twice, then succeeds.",
    "retry": {"max_attempts": 4, "initial_delay": "300ms", "backoff_factor": 2, "jitter": 0.1},
    "nodes": [
        {"id": "sync", "type": "tool", "tool": "demo_flaky_crm_sync",
         "args": {"account": "{{ payload.account }}"}},
        {"id": "done", "type": "finish", "output": "{{ steps.sync }}"},
    ],
}  # fmt: skip

MEETINGS = [
    ("Acme Corp", "Renewal call.\nACTION: Dana sends the renewal quote by Friday\n"
                  "ACTION: Lee books a training session\nWe discussed pricing."),
    ("Globex", "Kick-off.\nACTION: Sam shares the onboarding plan"),
    ("Initech", "QBR.\nACTION: Dana reviews license usage\nACTION: Lee follows up on the API bug"),
]  # fmt: skip

_ACTION = re.compile(r"^ACTION:\s*(?P<who>\w+)\s+(?P<what>.+)$", re.MULTILINE)
_CRM_CALLS: dict[str, int] = {}


@agentflow.tool(name="demo_extract_action_items")
def extract_action_items(transcript: str) -> dict[str, Any]:
    """Find the action items in a transcript (lines starting with 'ACTION:')."""
    items = [{"owner": m["who"], "action": m["what"].strip()} for m in _ACTION.finditer(transcript)]
    return {"items": items}


@agentflow.tool(name="demo_create_tasks")
def create_tasks(ctx: StepContext, account: str, items: list[dict[str, str]]) -> dict[str, Any]:
    """Create one task per action item; the rows are written with the step's checkpoint."""
    due = datetime.now(UTC) + timedelta(days=3)
    for item in items:
        ctx.create_task(
            f"{item['owner']}: {item['action']}",
            assignee=f"{item['owner'].lower()}@example.com",
            due_at=due,
            priority="high" if "renewal" in item["action"].lower() else "normal",
            account_id=account,
        )
    return {"created": len(items)}


@agentflow.tool(name="demo_check_in")
async def check_in(account: str, created: int) -> dict[str, str]:
    """Look at the account's tasks again after the wait."""
    return {"summary": f"{created} follow-up task(s) open for {account}"}


@agentflow.tool(name="demo_flaky_crm_sync")
async def flaky_crm_sync(ctx: StepContext, account: str) -> dict[str, Any]:
    """Fail the first two attempts (in this process), as a CRM outage would."""
    _CRM_CALLS[account] = _CRM_CALLS.get(account, 0) + 1
    if _CRM_CALLS[account] <= 2:
        raise ConnectionError("CRM answered 503 Service Unavailable")
    return {"synced": account, "attempt": ctx.attempt, "idempotency_key": ctx.idempotency_key}


def demo(
    timeout: float = typer.Option(60.0, help="Give up after this many seconds."),
) -> None:
    """Run the demo workflows end to end on the embedded database."""
    run_with_engine(lambda engine: _demo(engine, timeout))


async def _demo(engine: Engine, timeout: float) -> None:
    where = engine.settings.database_url or f"embedded PostgreSQL in {engine.settings.data_dir}"
    console.print(f"[bold]agentflow demo[/] on {where}\n")
    for config in (MEETING_FOLLOW_UP, CRM_SYNC):
        published = await engine.publish_workflow(config)
        state = "published" if published.created else "unchanged"
        console.print(f"{state} workflow [bold]{config['name']}[/] version {published.version.version}")
    runs = [
        await engine.start_run(MEETING_FOLLOW_UP["name"], {"account": a, "transcript": t})
        for a, t in MEETINGS
    ]
    runs.append(await engine.start_run(CRM_SYNC["name"], {"account": "Acme Corp"}))
    console.print(f"started {len(runs)} runs; a worker executes them (one waits 2 s, one retries)\n")
    worker = engine.worker(concurrency=8)
    worker_task = asyncio.create_task(worker.run())
    try:
        finished = await _watch(engine, runs, timeout)
    finally:
        worker.stop()
        await worker_task
    for run in finished:
        console.print(timeline(run, await engine.list_steps(run.id)))
        if run.output is not None:
            console.print(f"  output: {run.output}")
        created = await engine.tasks.list(run_id=run.id)
        if created:
            table = Table(
                "task", "assignee", "priority", "due", title="  tasks created", title_justify="left"
            )
            for task in created:
                due = f"{task.due_at:%Y-%m-%d}" if task.due_at else "-"
                table.add_row(task.title, task.assignee or "-", task.priority or "-", due)
            console.print(table)
        console.print()
    ok = sum(r.status == "completed" for r in finished)
    console.print(f"[bold]{ok}/{len(finished)} runs completed[/]")
    if ok != len(finished):
        raise typer.Exit(1)


async def _watch(engine: Engine, runs: list[RunRecord], timeout: float) -> list[RunRecord]:
    deadline = asyncio.get_running_loop().time() + timeout
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=console, transient=True) as bar:
        job = bar.add_task("running", total=len(runs))
        while True:
            current = [await engine.get_run(r.id) for r in runs]
            done = sum(r.status.is_terminal for r in current)
            statuses = ", ".join(sorted({r.status.value for r in current}))
            bar.update(job, completed=done, description=f"{done}/{len(runs)} runs finished ({statuses})")
            if done == len(runs) or asyncio.get_running_loop().time() > deadline:
                return current
            await asyncio.sleep(0.1)
