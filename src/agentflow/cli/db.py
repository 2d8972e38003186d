"""``agentflow db``: schema migrations."""

from __future__ import annotations

import typer

from agentflow.cli.common import console, run_async, settings_with
from agentflow.connecting import server_url, upgrade_schema

app = typer.Typer(help="Database schema.", no_args_is_help=True)


@app.command("upgrade")
def upgrade() -> None:
    """Apply pending migrations (they also apply at every start-up)."""
    settings = settings_with()

    async def go() -> list[str]:
        url, embedded = await server_url(settings)
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
