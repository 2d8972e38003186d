"""``agentflow people``: who requests can be for (handles, emails, roles)."""

from __future__ import annotations

import typer
from rich.table import Table

from agentflow.cli.common import console, run_with_engine
from agentflow.engine import Engine

app = typer.Typer(help="Set, list and remove people (who requests can be for).", no_args_is_help=True)


@app.command("set")
def set_(
    handle: str = typer.Argument(..., help="Their handle (as assignees name them), e.g. lee."),
    name: str | None = typer.Option(None, "--name", "-n", help="Their name."),
    email: str | None = typer.Option(None, "--email", "-e", help="Where the email channel mails them."),
    role: list[str] | None = typer.Option(None, "--role", "-r", help="A role they hold (repeatable)."),
) -> None:
    """Create or replace a person (what is not given is cleared)."""

    async def go(engine: Engine) -> None:
        person = await engine.people.set(handle, {"name": name, "email": email, "roles": role or []})
        console.print(f"person {person.handle} saved: roles {', '.join(person.roles) or '(none)'}")

    run_with_engine(go)


@app.command("list")
def list_(
    role: str | None = typer.Option(None, "--role", "-r", help="Only those who hold this role."),
) -> None:
    """List people by handle."""

    async def go(engine: Engine) -> None:
        found = await engine.people.list(role=role)
        table = Table("handle", "name", "email", "roles")
        for person in found:
            table.add_row(person.handle, person.name or "", person.email or "", ", ".join(person.roles))
        console.print(table)

    run_with_engine(go)


@app.command("delete")
def delete(
    handle: str = typer.Argument(..., help="Their handle."),
    force: bool = typer.Option(False, "--force", help="Even though published workflows name them."),
) -> None:
    """Remove a person (their past answers stay). Refused while published workflows name them
    as an assignee (they are named), unless --force."""

    async def go(engine: Engine) -> None:
        await engine.people.delete(handle, force=force)
        console.print(f"person {handle} removed")

    run_with_engine(go)
