"""``agentflow events``: publish events and look at the log."""

from __future__ import annotations

import typer
from rich.table import Table

from agentflow.cli.common import console, parse_json_option, run_with_engine
from agentflow.cli.render import short
from agentflow.engine import Engine

app = typer.Typer(help="Publish events and inspect the event log.", no_args_is_help=True)


@app.command("publish")
def publish(
    topic: str = typer.Argument(..., help="What happened, e.g. email.received."),
    data: str | None = typer.Option(None, "--data", "-d", help="The payload, a JSON object."),
    message_id: str | None = typer.Option(None, "--message-id", "-m", help="Your id (default: generated)."),
    account: str | None = typer.Option(None, "--account", "-a", help="The account it is about."),
) -> None:
    """Publish one event (re-publishing the same topic and message id returns the original)."""
    payload = parse_json_option(data, "--data")
    event = {"topic": topic, "data": payload if payload is not None else {}}
    if message_id:
        event["message_id"] = message_id
    if account:
        event["account_id"] = account

    async def go(engine: Engine) -> None:
        (result,) = await engine.events.publish([event])
        what = "published" if result.created else "already published"
        console.print(f"{what} {result.event.topic} {result.event.message_id} (seq {result.event.seq})")

    run_with_engine(go)


@app.command("account")
def account(
    account_id: str = typer.Argument(..., help="The account."),
    hours: float = typer.Option(2.0, help="How far back to look."),
    source: list[str] = typer.Option(
        [], "--source", "-s", help="Only these sources (email, ticket, note, meeting, ...); repeatable."
    ),
) -> None:
    """What happened for an account recently, newest first."""

    async def go(engine: Engine) -> None:
        table = Table("published", "topic", "message id", "data")
        found = await engine.events.for_account(
            account_id, since_seconds=hours * 3600, sources=source or None
        )
        for e in found:
            table.add_row(f"{e.published_at:%Y-%m-%d %H:%M:%S}", e.topic, e.message_id, short(e.data, 60))
        console.print(table)

    run_with_engine(go)


@app.command("lag")
def lag(consumer: str = typer.Argument(..., help="The consumer's name.")) -> None:
    """How far a consumer is behind the log."""

    async def go(engine: Engine) -> None:
        figures = await engine.events.lag(consumer)
        console.print(
            f"{consumer}: {figures['events']} event(s) behind, oldest {figures['seconds']:.1f}s old"
        )

    run_with_engine(go)


@app.command("prune")
def prune(
    older_than_hours: float = typer.Option(168.0, "--older-than-hours", help="Age of events to delete."),
) -> None:
    """Delete old events that every consumer has processed, and old dispatch decisions."""

    async def go(engine: Engine) -> None:
        events, decisions = await engine.events.prune(older_than_hours * 3600)
        console.print(f"deleted {events} event(s) and {decisions} dispatch decision(s)")

    run_with_engine(go)
