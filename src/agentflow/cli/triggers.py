"""``agentflow triggers``: webhook URLs, signing secrets and dispatch decisions."""

from __future__ import annotations

import typer
from rich.table import Table

from agentflow.cli.common import console, run_with_engine
from agentflow.cli.render import short
from agentflow.engine import Engine

app = typer.Typer(help="Webhook triggers and what events did at a workflow.", no_args_is_help=True)


@app.command("url")
def url(workflow: str = typer.Argument(..., help="The workflow's name or id.")) -> None:
    """Print the workflow's public and private trigger URLs."""

    async def go(engine: Engine) -> None:
        found = await engine.get_workflow(workflow)
        base = engine.settings.base_url
        signed = await engine.webhooks.has_secret(found.id, workspace_id=found.workspace_id)
        console.print(f"public:  POST {base}/api/public/trigger/<trigger key>/{found.id}", highlight=False)
        console.print(f"         or the key in X-Agentflow-Trigger-Key: {base}/api/public/trigger/{found.id}")
        console.print(
            f"private: POST {base}/api/private/trigger/{found.id}  (Authorization: Bearer <API key>)"
        )
        console.print(f"signatures: {'required (Standard Webhooks)' if signed else 'not required'}")

    run_with_engine(go)


@app.command("secret")
def secret(
    workflow: str = typer.Argument(..., help="The workflow's name or id."),
    remove: bool = typer.Option(False, "--remove", help="Stop requiring signatures."),
) -> None:
    """Make the public trigger require Standard Webhooks signatures (prints a new secret)."""

    async def go(engine: Engine) -> None:
        found = await engine.get_workflow(workflow)
        if remove:
            had = await engine.webhooks.remove_secret(found.id, workspace_id=found.workspace_id)
            console.print("signing secret removed" if had else "the workflow had no signing secret")
            return
        value = await engine.webhooks.rotate_secret(found.id, workspace_id=found.workspace_id)
        console.print("signing secret (store it now; it is not shown again):")
        console.print(value, highlight=False, soft_wrap=True)

    run_with_engine(go)


@app.command("decisions")
def decisions(
    workflow: str = typer.Argument(..., help="The workflow's name or id."),
    limit: int = typer.Option(20, min=1, max=500, help="How many, newest first."),
) -> None:
    """What each event did at the workflow (started, enrolled, debounced, not matched...) and why."""

    async def go(engine: Engine) -> None:
        found = await engine.get_workflow(workflow)
        table = Table("when", "event", "decision", "key", "run", "why")
        for d in await engine.events.decisions(found.id, limit=limit, workspace_id=found.workspace_id):
            table.add_row(
                f"{d['created_at']:%H:%M:%S}", f"{d['event_topic']} {d['event_message_id']}", d["decision"],
                d["enrollment_key"] or "", str(d["run_id"] or "")[:8], short(d["reason"], 60),
            )  # fmt: skip
        console.print(table)

    run_with_engine(go)
