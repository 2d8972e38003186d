"""``agentflow bench``: benchmark the engine on a fresh database (see benchmarks/README.md)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer
from rich.console import Console

from agentflow.bench.runner import BenchOptions, run_bench, selected
from agentflow.cli.common import console, err_console
from agentflow.settings import Settings


def bench(
    workloads: list[str] | None = typer.Option(
        None, "--workload", "-w", help="Workloads to run, e.g. W1,W3 or E1,E2,E3 (default: all). Repeatable."
    ),
    json_file: Path | None = typer.Option(None, "--json", help="Also write the results as JSON here."),
    quick: bool = typer.Option(False, "--quick", help="Small sizes (about a minute); skips W4-10k."),
    runs: int | None = typer.Option(
        None, "--runs", min=1, help="Runs for W1 and W4 (default 2,000 / 1,000)."
    ),
    workers: int = typer.Option(2, "--workers", min=1, help="Worker processes for W1 and W4."),
    concurrency: int = typer.Option(32, "--concurrency", "-c", min=1, help="Runs at once per worker."),
) -> None:
    """Run the benchmark workloads and print each figure next to its floor ratio and target.

    Runs on a new embedded PostgreSQL in a temporary directory, or on the server of
    AGENTFLOW_DATABASE_URL when it is set; each workload gets a new database, dropped after.
    """
    try:
        keys = selected(workloads, quick)
    except ValueError as exc:
        err_console.print(f"[bold red]error[/] {exc}")
        raise typer.Exit(2) from None
    options = BenchOptions(
        workloads=keys,
        quick=quick,
        runs=runs,
        workers=workers,
        concurrency=concurrency,
        server_url=Settings().database_url,
    )
    report = asyncio.run(run_bench(options, lambda line: err_console.print(f"[dim]{line}[/]")))
    # Piped output defaults to 80 columns, too narrow for the table: widen it there.
    out = console if console.is_terminal else Console(width=160)
    out.print(report.table())
    if json_file is not None:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        json_file.write_text(json.dumps(report.to_json(), indent=2, default=str) + "\n")
        console.print(f"wrote {json_file}")
    if any(w.error for w in report.workloads):
        raise typer.Exit(1)
