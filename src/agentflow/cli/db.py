"""``agentflow db``: schema migrations."""

from __future__ import annotations

import asyncio

import typer

from agentflow.cli.common import console, run_async, settings_with
from agentflow.connecting import upgrade_schema
from agentflow.store.embedded import EmbeddedServer

app = typer.Typer(help="Database schema.", no_args_is_help=True)


@app.command("upgrade")
def upgrade() -> None:
    """Apply pending migrations (they also apply at every start-up)."""
    settings = settings_with()

    async def go() -> list[str]:
        embedded = None
        url = settings.database_url
        if url is None:
            embedded = await asyncio.to_thread(EmbeddedServer, settings.data_dir)
            url = embedded.url()
        try:
            return [f"{m.version:04d}_{m.name}" for m in await upgrade_schema(url)]
        finally:
            if embedded is not None:
                embedded.stop()

    applied = run_async(go)
    if applied:
        for name in applied:
            console.print(f"applied [bold]{name}[/]")
    else:
        console.print("the schema is up to date")
