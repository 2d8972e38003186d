"""``agentflow accounts``: set, show and list what the agent knows about accounts."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table

from agentflow.cli.common import console, err_console, run_with_engine
from agentflow.cli.render import short
from agentflow.core.accounts import AccountRecord
from agentflow.engine import Engine

app = typer.Typer(help="Set, show and list accounts (what the agent knows about them).", no_args_is_help=True)


@app.command("set")
def set_(
    account_id: str = typer.Argument(..., help="The account id (as events carry it)."),
    name: str | None = typer.Option(None, "--name", "-n", help="Its display name."),
    owner: str | None = typer.Option(None, "--owner", "-o", help="Who looks after it: an email or a name."),
    attr: list[str] | None = typer.Option(
        None,
        "--attr",
        "-a",
        help="An attribute KEY=VALUE, merged into the stored ones (repeatable). VALUE is read as JSON"
        " when it is JSON (40, true, {...}), else as text; KEY=null removes the attribute.",
    ),
) -> None:
    """Create an account or update it (fields not given are kept)."""
    attributes = _attributes(attr or [])

    async def go(engine: Engine) -> None:
        account = await engine.accounts.upsert(account_id, name=name, owner=owner, attributes=attributes)
        console.print(f"account {account.id} saved")
        _print_account(account)

    run_with_engine(go)


@app.command("show")
def show(account_id: str = typer.Argument(..., help="The account id.")) -> None:
    """Show an account."""

    async def go(engine: Engine) -> None:
        _print_account(await engine.accounts.get(account_id))

    run_with_engine(go)


@app.command("list")
def list_(
    owner: str | None = typer.Option(None, "--owner", "-o", help="Only this owner's accounts."),
    limit: int = typer.Option(100, min=1, max=500),
    after: str | None = typer.Option(None, "--after", help="Continue after this account id."),
) -> None:
    """List accounts by id."""

    async def go(engine: Engine) -> None:
        found = await engine.accounts.list(owner=owner, limit=limit, after=after)
        table = Table("account", "name", "owner", "attributes", "updated")
        for a in found:
            updated = f"{a.updated_at:%Y-%m-%d %H:%M}"
            table.add_row(a.id, a.name or "", a.owner or "", short(a.attributes, 60), updated)
        console.print(table)

    run_with_engine(go)


def _print_account(account: AccountRecord) -> None:
    console.print(f"[bold]{account.name or account.id}[/]  ({account.id})")
    if account.owner:
        console.print(f"  owner: {account.owner}")
    for key, value in sorted(account.attributes.items()):
        console.print(f"  {key}: {short(value, 200)}")
    console.print(f"  updated: {account.updated_at:%Y-%m-%d %H:%M:%S %Z}")


def _attributes(pairs: list[str]) -> dict[str, Any] | None:
    """``KEY=VALUE`` options as attributes (a VALUE that is JSON is read as JSON)."""
    if not pairs:
        return None
    attributes: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            err_console.print(f"[bold red]error[/] invalid_attribute: --attr takes KEY=VALUE, not {pair!r}")
            raise typer.Exit(2)
        try:
            attributes[key] = json.loads(text)
        except json.JSONDecodeError:
            attributes[key] = text
    return attributes
