"""``agentflow tasks``: list, show, change and complete tasks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import typer
from rich.table import Table

from agentflow.cli.common import console, err_console, parse_json_option, run_with_engine
from agentflow.cli.render import short
from agentflow.core.tasks import TaskRecord, TaskUpdate
from agentflow.engine import Engine

app = typer.Typer(help="List, show, change and complete tasks.", no_args_is_help=True)

_CLEAR = "Pass an empty string to clear it."


@app.command("list")
def list_(
    run: str | None = typer.Option(None, "--run", "-r", help="Only tasks this run created."),
    status: str | None = typer.Option(None, "--status", "-s", help="open, in_progress, completed, canceled."),
    assignee: str | None = typer.Option(None, "--assignee", "-a", help="Only tasks assigned to this person."),
    account: str | None = typer.Option(None, "--account", help="Only tasks about this account."),
    due_before: str | None = typer.Option(None, help="Due before this ISO 8601 time (UTC unless it says)."),
    due_after: str | None = typer.Option(None, help="Due after this ISO 8601 time (UTC unless it says)."),
    limit: int = typer.Option(100, min=1, max=500),
) -> None:
    """List tasks, oldest first."""
    before, after = _time(due_before, "--due-before"), _time(due_after, "--due-after")

    async def go(engine: Engine) -> None:
        found = await engine.tasks.list(
            run_id=run, status=status, assignee=assignee, account_id=account,
            due_before=before, due_after=after, limit=limit,
        )  # fmt: skip
        table = Table("task", "title", "status", "assignee", "due", "priority", "rev")
        for t in found:
            due = f"{t.due_at:%Y-%m-%d %H:%M}" if t.due_at else ""
            table.add_row(
                str(t.id), t.title, t.status, t.assignee or "", due, t.priority or "", str(t.revision)
            )
        console.print(table)

    run_with_engine(go)


@app.command("show")
def show(task_id: str = typer.Argument(..., help="The task id.")) -> None:
    """Show a task."""

    async def go(engine: Engine) -> None:
        _print_task(await engine.tasks.get(task_id))

    run_with_engine(go)


@app.command("update")
def update(
    task_id: str = typer.Argument(..., help="The task id."),
    status: str | None = typer.Option(None, "--status", "-s", help="open, in_progress, completed, canceled."),
    assignee: str | None = typer.Option(None, "--assignee", "-a", help=f"Who does it. {_CLEAR}"),
    due: str | None = typer.Option(None, "--due", help=f"When it is due (ISO 8601 with a zone). {_CLEAR}"),
    priority: str | None = typer.Option(None, "--priority", "-p", help=f"e.g. high. {_CLEAR}"),
    title: str | None = typer.Option(None, "--title", help="A new title."),
    description: str | None = typer.Option(None, "--description", help=f"A new description. {_CLEAR}"),
    metadata: str | None = typer.Option(
        None, "--metadata", "-m", help="A JSON object merged into the metadata (null removes a key)."
    ),
    revision: int | None = typer.Option(None, "--revision", help="Only if the task is at this revision."),
) -> None:
    """Change a task (one event, delivered to the run that created it)."""
    change: dict[str, Any] = {}
    for name, value in (("assignee", assignee), ("due_at", due), ("priority", priority),
                        ("description", description)):  # fmt: skip
        if value is not None:
            change[name] = value or None
    if status is not None:
        change["status"] = status
    if title is not None:
        change["title"] = title
    if metadata is not None:
        change["metadata"] = parse_json_option(metadata, "--metadata")
    if revision is not None:
        change["expected_revision"] = revision

    async def go(engine: Engine) -> None:
        _print_update(await engine.tasks.update(task_id, change))

    run_with_engine(go)


@app.command("complete")
def complete(task_id: str = typer.Argument(..., help="The task id.")) -> None:
    """Mark a task completed."""

    async def go(engine: Engine) -> None:
        _print_update(await engine.tasks.complete(task_id))

    run_with_engine(go)


def _print_task(task: TaskRecord) -> None:
    console.print(f"[bold]{task.title}[/]  ({task.id}, revision {task.revision})")
    for name in ("status", "assignee", "due_at", "priority", "account_id", "run_id", "completed_at"):
        value = getattr(task, name)
        if value is not None:
            console.print(f"  {name}: {value}")
    if task.description:
        console.print(f"  description: {task.description}")
    if task.metadata:
        console.print(f"  metadata: {short(task.metadata, 200)}")


def _print_update(update: TaskUpdate) -> None:
    if not update.changes:
        console.print(f"task {update.task.id}: nothing changed (revision {update.task.revision})")
        return
    for name, change in update.changes.items():
        console.print(f"  {name}: {_shown(change['old'])} -> {_shown(change['new'])}")
    reached = "; delivered to its run" if update.delivered else ""
    console.print(f"task {update.task.id}: revision {update.task.revision}, event {update.topic} "
                  f"{update.message_id}{reached}")  # fmt: skip


def _shown(value: Any) -> str:
    return "null" if value is None else short(value, 50)


def _time(text: str | None, name: str) -> datetime | None:
    """An ISO 8601 time from the command line; one without a zone is UTC, as the help says."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        err_console.print(f"[bold red]error[/] invalid_time: {name} is not an ISO 8601 time ({text!r})")
        raise typer.Exit(2) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
