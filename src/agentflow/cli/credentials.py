"""``agentflow credentials``: the workspace's named secrets (list, show, set, delete).

Secrets are never taken as command-line arguments (they would sit in the shell's history and
in ``ps``): ``set`` reads the credential's fields as YAML or JSON from a file or stdin.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
import yaml
from rich.table import Table

from agentflow.cli.common import console, err_console, run_with_engine
from agentflow.core import safe_yaml
from agentflow.core.credentials import CredentialRecord
from agentflow.engine import Engine
from agentflow.key_rotation import reseal_secrets

app = typer.Typer(help="List, show, set and delete credentials (named secrets).", no_args_is_help=True)


@app.command("list")
def list_() -> None:
    """Every credential of the workspace (never their secrets)."""

    async def go(engine: Engine) -> None:
        table = Table("name", "kind", "secret fields", "token expires", "updated")
        for c in await engine.credentials.list():
            expires = f"{c.token_expires_at:%Y-%m-%d %H:%M}" if c.token_expires_at else "-"
            updated = f"{c.updated_at:%Y-%m-%d %H:%M}"
            table.add_row(c.name, c.kind, ", ".join(c.secret_fields), expires, updated)
        console.print(table)

    run_with_engine(go)


@app.command("show")
def show(name: str = typer.Argument(..., help="The credential's name.")) -> None:
    """A credential's kind, metadata and the names of its secret fields."""

    async def go(engine: Engine) -> None:
        _print(await engine.credentials.get(name))

    run_with_engine(go)


@app.command("set")
def set_(
    name: str = typer.Argument(..., help="What nodes write in 'credential:'."),
    file: str = typer.Option(
        "-",
        "--file",
        "-f",
        help="A YAML or JSON file with 'kind' and that kind's fields (- reads stdin), e.g."
        " {kind: bearer, token: ...}. See docs/credentials.md.",
    ),
) -> None:
    """Create the credential or replace all of it, from its fields in a file or on stdin."""
    text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    try:
        spec = safe_yaml.load(text)
    except yaml.YAMLError as exc:
        err_console.print(f"[bold red]error[/] credential_invalid: the fields are not YAML or JSON: {exc}")
        raise typer.Exit(2) from None
    if not isinstance(spec, dict):
        err_console.print("[bold red]error[/] credential_invalid: give a mapping with 'kind' and its fields")
        raise typer.Exit(2)

    async def go(engine: Engine) -> None:
        record, created = await engine.credentials.put(name, spec)
        console.print(f"{'created' if created else 'replaced'} credential {record.name} ({record.kind})")

    run_with_engine(go)


@app.command("delete")
def delete(
    name: str = typer.Argument(..., help="The credential's name."),
    force: bool = typer.Option(False, "--force", help="Even though published workflows use it."),
) -> None:
    """Delete a credential; steps that name it then fail with credential_not_found. Refused
    while published workflows use it (they are named), unless --force."""

    async def go(engine: Engine) -> None:
        record = await engine.credentials.delete(name, force=force)
        console.print(f"deleted credential {record.name} ({record.kind})")

    run_with_engine(go)


def _print(c: CredentialRecord) -> None:
    console.print(f"[bold]{c.name}[/] ({c.kind}), version {c.version}", highlight=False)
    for key, value in c.metadata.items():
        console.print(f"  {key}: {value}", highlight=False)
    console.print(f"  secret fields: {', '.join(c.secret_fields) or '-'} (never shown)", highlight=False)
    if c.token_expires_at is not None:
        console.print(f"  token expires: {c.token_expires_at:%Y-%m-%d %H:%M:%S %Z}", highlight=False)


@app.command("rotate-key")
def rotate_key() -> None:
    """Seal every stored secret again with AGENTFLOW_SECRET_KEY (the old key in
    AGENTFLOW_SECRET_KEY_PREVIOUS): credentials, webhook signing secrets, consents in flight."""

    async def go(engine: Engine) -> None:
        current, previous = engine.sealing_keys()
        done = await reseal_secrets(engine.db, current, previous)
        for kind, count in done.resealed.items():
            console.print(f"{kind}: {count} sealed again, {done.current[kind]} already with this key")
        if done.unreadable:
            err_console.print(f"unreadable with either key, left as they are: {', '.join(done.unreadable)}")
            raise typer.Exit(1)

    run_with_engine(go)
