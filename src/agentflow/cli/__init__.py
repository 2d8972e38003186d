"""The ``agentflow`` command line (Typer + Rich)."""

from __future__ import annotations

import logging
import os

import typer

from agentflow.cli import (
    accounts,
    approvals,
    bench,
    credentials,
    db,
    demo,
    evaluate,
    events,
    keys,
    knowledge,
    nodes,
    people,
    report,
    runs,
    serve,
    tasks,
    triggers,
    worker,
    workflows,
    workspaces,
)
from agentflow.cli.common import check_settings, choose_event_loop
from agentflow.core.errors import AgentflowError
from agentflow.runtime import tracing
from agentflow.runtime.log_context import configure_logging

app = typer.Typer(
    name="agentflow",
    help="A durable agentic workflow engine on PostgreSQL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(db.app, name="db")
app.add_typer(workflows.app, name="workflows")
app.add_typer(nodes.app, name="nodes")
app.add_typer(runs.app, name="runs")
app.add_typer(events.app, name="events")
app.add_typer(tasks.app, name="tasks")
app.add_typer(knowledge.app, name="knowledge")
app.add_typer(accounts.app, name="accounts")
app.add_typer(people.app, name="people")
app.add_typer(approvals.app, name="approvals")
app.add_typer(approvals.budget_app, name="budget")
app.add_typer(keys.app, name="keys")
app.add_typer(workspaces.app, name="workspaces")
app.add_typer(credentials.app, name="credentials")
app.add_typer(triggers.app, name="triggers")
app.command("worker")(worker.worker)
app.command("serve")(serve.serve)
app.command("bench")(bench.bench)
app.command("demo")(demo.demo)
app.command("report")(report.report)
app.command("eval")(evaluate.evaluate)


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log at INFO level."),
) -> None:
    # AGENTFLOW_LOG_FORMAT=json: one JSON object a line, naming the run each line is about.
    fmt = "json" if os.environ.get("AGENTFLOW_LOG_FORMAT", "text").strip().lower() == "json" else "text"
    configure_logging(logging.INFO if verbose else logging.WARNING, fmt)
    # AGENTFLOW_TRACES=otlp: spans of runs, steps and model calls to OTEL_EXPORTER_OTLP_ENDPOINT.
    try:
        tracing.configure(os.environ.get("AGENTFLOW_TRACES", "off"))
        # AGENTFLOW_EVENT_LOOP: uvloop (auto, where installed) or the standard asyncio loop.
        choose_event_loop(os.environ.get("AGENTFLOW_EVENT_LOOP", "auto"))
    except AgentflowError as exc:
        typer.echo(f"error: {exc.info.message}", err=True)
        raise typer.Exit(2) from None
    check_settings()


def main() -> None:
    """Entry point of the ``agentflow`` console script."""
    app()
