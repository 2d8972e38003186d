"""``agentflow keys``: workspace API keys and public trigger keys."""

from __future__ import annotations

from typing import Literal

import typer
from rich.table import Table

from agentflow.cli.common import console, run_with_engine
from agentflow.core.roles import ROLES
from agentflow.engine import Engine

app = typer.Typer(help="Create, list and revoke access keys.", no_args_is_help=True)


@app.command("create")
def create(
    name: str = typer.Argument(..., help="What the key is for, e.g. 'zendesk webhook'."),
    kind: str = typer.Option(
        "api", "--kind", "-k", help="api (Bearer, the API) or trigger (public trigger URLs)."
    ),
    role: str = typer.Option(
        "admin", "--role", "-r", help="For API keys: admin, operator (runs things) or viewer (reads)."
    ),
) -> None:
    """Create a key and print its token (shown this once; only its hash is stored)."""
    chosen: Literal["api", "trigger"] = "trigger" if kind == "trigger" else "api"
    if kind not in ("api", "trigger"):
        console.print(f"[bold red]error[/] key_invalid: --kind is 'api' or 'trigger', not {kind!r}")
        raise typer.Exit(2)

    if role not in ROLES:
        console.print(f"[bold red]error[/] key_invalid: --role is one of {', '.join(ROLES)}, not {role!r}")
        raise typer.Exit(2)

    async def go(engine: Engine) -> None:
        record, token = await engine.keys.create(chosen, name, role=role)
        console.print(f"created {record['kind']} key {record['id']} ({record['name']}, {record['role']})")
        console.print("token (store it now; it is not shown again):")
        console.print(token, highlight=False, soft_wrap=True)

    run_with_engine(go)


@app.command("list")
def list_keys() -> None:
    """Every key of the workspace (never their secrets)."""

    async def go(engine: Engine) -> None:
        table = Table("id", "kind", "role", "name", "created", "last used", "revoked")
        for k in await engine.keys.list():
            table.add_row(
                k["id"], k["kind"], k["role"], k["name"], f"{k['created_at']:%Y-%m-%d %H:%M}",
                f"{k['last_used_at']:%Y-%m-%d %H:%M}" if k["last_used_at"] else "-",
                f"{k['revoked_at']:%Y-%m-%d %H:%M}" if k["revoked_at"] else "",
            )  # fmt: skip
        console.print(table)

    run_with_engine(go)


@app.command("revoke")
def revoke(key_id: str = typer.Argument(..., help="The key's id (the part after afk_/aft_).")) -> None:
    """Revoke a key; it stops working at once."""

    async def go(engine: Engine) -> None:
        record = await engine.keys.revoke(key_id)
        console.print(f"revoked {record['kind']} key {record['id']} ({record['name']})")

    run_with_engine(go)
