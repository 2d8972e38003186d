"""``agentflow approvals``: list, show, approve and reject side-effecting agent calls;
``agentflow budget``: the workspace's daily model budget."""

from __future__ import annotations

import json
import uuid
from typing import Any

import typer
from rich.table import Table

from agentflow.cli.common import console, err_console, run_with_engine
from agentflow.engine import Engine

app = typer.Typer(help="Approve or reject agent tool calls that need a person.", no_args_is_help=True)
budget_app = typer.Typer(help="The workspace's daily model budget.", no_args_is_help=True)


def _id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        err_console.print(f"[red]not an approval id:[/red] {value}")
        raise typer.Exit(2) from None


@app.command("list")
def list_(
    status: str = typer.Option(
        "pending", "--status", "-s", help="pending, approved, rejected, expired or all."
    ),
    limit: int = typer.Option(100, min=1, max=500),
) -> None:
    """List approval requests, newest first."""

    async def go(engine: Engine) -> None:
        found = await engine.governance.approvals(status=None if status == "all" else status, limit=limit)
        table = Table("approval", "run", "tool", "status", "arguments", "created")
        for a in found:
            args = json.dumps(a["arguments"], ensure_ascii=False)
            table.add_row(
                str(a["id"]),
                str(a["run_id"]),
                a["tool"],
                a["status"],
                args[:60],
                f"{a['created_at']:%Y-%m-%d %H:%M}",
            )
        console.print(table)

    run_with_engine(go)


@app.command("show")
def show(approval_id: str = typer.Argument(..., help="The approval id.")) -> None:
    """Show a request: the exact call and its arguments hash."""

    async def go(engine: Engine) -> None:
        _print(await engine.governance.approval(_id(approval_id)))

    run_with_engine(go)


def _decide(approval_id: str, approve: bool, reason: str | None, by: str | None, expect: str | None) -> None:
    async def go(engine: Engine) -> None:
        decided = await engine.governance.decide(
            _id(approval_id), approve=approve, reason=reason, decided_by=by, arguments_hash=expect
        )
        _print(decided)

    run_with_engine(go)


@app.command("approve")
def approve(
    approval_id: str = typer.Argument(..., help="The approval id."),
    reason: str | None = typer.Option(None, "--reason", help="Why (recorded)."),
    by: str | None = typer.Option(None, "--by", help="Who decides (recorded)."),
    expect: str | None = typer.Option(
        None, "--hash", help="Refuse unless the request has this arguments hash."
    ),
) -> None:
    """Approve the exact call; its run wakes and makes it."""
    _decide(approval_id, True, reason, by, expect)


@app.command("reject")
def reject(
    approval_id: str = typer.Argument(..., help="The approval id."),
    reason: str | None = typer.Option(None, "--reason", help="Why (the model sees it)."),
    by: str | None = typer.Option(None, "--by", help="Who decides (recorded)."),
    expect: str | None = typer.Option(
        None, "--hash", help="Refuse unless the request has this arguments hash."
    ),
) -> None:
    """Reject the call; the model sees the rejection and the reason."""
    _decide(approval_id, False, reason, by, expect)


def _print(a: dict[str, Any]) -> None:
    console.print(f"[bold]{a['tool']}[/bold] for run {a['run_id']}  [{a['status']}]")
    console.print(json.dumps(a["arguments"], indent=2, ensure_ascii=False))
    console.print(f"arguments hash  {a['arguments_hash']}")
    console.print(f"expires         {a['expires_at']}")
    if a["decided_at"]:
        console.print(f"decided         {a['decided_at']} by {a['decided_by'] or '-'}: {a['reason'] or ''}")


@budget_app.command("show")
def budget_show() -> None:
    """Show the daily limits and today's (UTC) spend."""

    async def go(engine: Engine) -> None:
        _print_budget(await engine.governance.budget(), engine)

    run_with_engine(go)


@budget_app.command("set")
def budget_set(
    usd: float | None = typer.Option(None, "--usd", min=0, help="USD per day (0: no limit)."),
    tokens: int | None = typer.Option(None, "--tokens", min=0, help="Tokens per day (0: no limit)."),
) -> None:
    """Set the workspace's daily model budget (an option left out goes back to the default)."""

    async def go(engine: Engine) -> None:
        _print_budget(await engine.governance.set_budget(daily_usd=usd, daily_tokens=tokens), engine)

    run_with_engine(go)


def _print_budget(b: dict[str, Any], engine: Engine) -> None:
    default_usd, default_tokens = engine.settings.workspace_daily_usd, engine.settings.workspace_daily_tokens
    usd = b["daily_usd"] if b["daily_usd"] is not None else default_usd
    tokens = b["daily_tokens"] if b["daily_tokens"] is not None else default_tokens
    console.print(f"daily limit  ${usd:.2f} / {tokens:,} tokens  (0 means no limit)")
    console.print(
        f"today {b['day']}  ${b['usd_cost']:.4f}, {b['input_tokens'] + b['output_tokens']:,} tokens,"
        f" {b['model_calls']} model calls"
    )
