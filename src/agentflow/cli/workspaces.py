"""``agentflow workspaces``: the tenants: create (with a first admin key), list, rename, and how
long each keeps its finished runs (``retention``, ``prune-runs``)."""

from __future__ import annotations

from uuid import UUID

import typer
from rich.table import Table

from agentflow.cli.common import console, run_with_engine
from agentflow.engine import Engine

app = typer.Typer(
    help="Create, list and rename workspaces; keep or prune their finished runs.", no_args_is_help=True
)


@app.command("create")
def create(name: str = typer.Argument(..., help="The workspace's name, e.g. 'acme support'.")) -> None:
    """Create a workspace and print its first admin API key (shown this once)."""

    async def go(engine: Engine) -> None:
        created, token = await engine.workspaces.create(name)
        console.print(f"created workspace {created['id']} ({created['name']})")
        console.print("its admin API key (store it now; it is not shown again):")
        console.print(token, highlight=False, soft_wrap=True)

    run_with_engine(go)


@app.command("list")
def list_workspaces() -> None:
    """Every workspace, by name."""

    async def go(engine: Engine) -> None:
        table = Table("id", "name", "created", "keeps finished runs")
        for w in await engine.workspaces.list():
            days = w["run_retention_days"]
            kept = "default" if days is None else "forever" if days == 0 else f"{days} days"
            table.add_row(str(w["id"]), w["name"], f"{w['created_at']:%Y-%m-%d %H:%M}", kept)
        console.print(table)

    run_with_engine(go)


@app.command("rename")
def rename(
    workspace_id: str = typer.Argument(..., help="The workspace's id."),
    name: str = typer.Argument(..., help="Its new name."),
) -> None:
    """Give a workspace another name."""
    target = _workspace(workspace_id)

    async def go(engine: Engine) -> None:
        renamed = await engine.workspaces.rename(target, name)
        console.print(f"renamed workspace {renamed['id']} to {renamed['name']}")

    run_with_engine(go)


@app.command("retention")
def retention(
    workspace_id: str = typer.Argument(..., help="The workspace's id."),
    days: str = typer.Argument(
        ..., help="Days to keep finished runs after they end (0: forever), or 'default' for the server's."
    ),
) -> None:
    """Say how long a workspace keeps its finished runs (and their steps)."""
    target = _workspace(workspace_id)
    if days.strip().lower() == "default":
        kept: int | None = None
    elif days.strip().isdigit():
        kept = int(days)
    else:
        console.print(
            f"[bold red]error[/] retention_invalid: {days[:40]!r} is neither a number of days nor 'default'"
        )
        raise typer.Exit(2)

    async def go(engine: Engine) -> None:
        changed = await engine.workspaces.set_run_retention(target, kept)
        said = "the server's default" if kept is None else "forever" if kept == 0 else f"{kept} day(s)"
        console.print(f"workspace {changed['id']} keeps its finished runs {said}")

    run_with_engine(go)


@app.command("prune-runs")
def prune_runs() -> None:
    """Delete finished runs past their workspace's retention now (workers do it once an hour)."""

    async def go(engine: Engine) -> None:
        pruned = await engine.workspaces.prune_runs(engine.settings.run_retention_days)
        for workspace_id, count in pruned.runs.items():
            console.print(f"workspace {workspace_id}: deleted {count} finished run(s)")
        console.print(f"deleted {pruned.total} finished run(s)")

    run_with_engine(go)


def _workspace(text: str) -> UUID:
    try:
        return UUID(text)
    except ValueError:
        console.print(f"[bold red]error[/] workspace_invalid: {text[:80]!r} is not a workspace id")
        raise typer.Exit(2) from None
