"""``agentflow workspaces``: the tenants: create (with a first admin key), list, rename."""

from __future__ import annotations

from uuid import UUID

import typer
from rich.table import Table

from agentflow.cli.common import console, run_with_engine
from agentflow.engine import Engine

app = typer.Typer(help="Create, list and rename workspaces.", no_args_is_help=True)


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
        table = Table("id", "name", "created")
        for w in await engine.workspaces.list():
            table.add_row(str(w["id"]), w["name"], f"{w['created_at']:%Y-%m-%d %H:%M}")
        console.print(table)

    run_with_engine(go)


@app.command("rename")
def rename(
    workspace_id: str = typer.Argument(..., help="The workspace's id."),
    name: str = typer.Argument(..., help="Its new name."),
) -> None:
    """Give a workspace another name."""
    try:
        target = UUID(workspace_id)
    except ValueError:
        console.print(f"[bold red]error[/] workspace_invalid: {workspace_id[:80]!r} is not a workspace id")
        raise typer.Exit(2) from None

    async def go(engine: Engine) -> None:
        renamed = await engine.workspaces.rename(target, name)
        console.print(f"renamed workspace {renamed['id']} to {renamed['name']}")

    run_with_engine(go)
