"""``agentflow eval``: replay recorded runs of an agent workflow against a version or a model,
and fail (exit 1) when the candidate misses the gate: a check for CI."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from agentflow.cli.common import console, run_with_engine
from agentflow.core.evals import EvalSummary, Gate
from agentflow.engine import Engine


def evaluate(
    workflow: str = typer.Argument(..., help="The agent workflow (name or id)."),
    version: int | None = typer.Option(
        None, "--version", help="The candidate version (default: the latest)."
    ),
    model: str | None = typer.Option(
        None, "--model", help="The candidate model, provider:model (default: the version's)."
    ),
    runs: int = typer.Option(
        20, "--runs", min=1, max=1000, help="How many of the newest ended runs to replay."
    ),
    min_agreement: float | None = typer.Option(
        None,
        "--min-agreement",
        min=0.0,
        max=1.0,
        help="Fail below this share of decisions with the same tools (0-1).",
    ),
    max_cost_ratio: float | None = typer.Option(
        None,
        "--max-cost-ratio",
        min=0.0,
        help="Fail when the candidate costs more than this times the recorded.",
    ),
    json_path: Path | None = typer.Option(
        None, "--json", help="Also write the whole comparison here as JSON."
    ),
) -> None:
    """Ask the candidate to decide again at every recorded decision of the workflow's newest
    ended runs, with the context each had then; compare tools, arguments, endings and cost."""

    async def go(engine: Engine) -> EvalSummary:
        return await engine.evals.replay(
            workflow, version=version, model=model, runs=runs, gate=Gate(min_agreement, max_cost_ratio)
        )

    summary = run_with_engine(go)
    if json_path is not None:
        json_path.write_text(json.dumps(summary.to_json(), indent=2, default=str))
    _print(summary)
    if summary.failures:
        for failure in summary.failures:
            console.print(f"[bold red]fail[/] {failure}")
        raise typer.Exit(1)
    console.print("[bold green]pass[/]" if summary.gate != Gate() else "done (no gate set)")


def _print(summary: EvalSummary) -> None:
    found = summary.to_json()
    table = Table(
        "runs", "decisions", "same tools", "same arguments", "same ending", "cost, recorded → candidate"
    )
    ratio = found["cost_ratio"]
    cost = f"${found['recorded_usd']:.4f} → ${found['candidate_usd']:.4f}"
    shares = [f"{found[k]:.0%}" for k in ("same_tools", "same_arguments", "same_ending")]
    table.add_row(
        str(found["runs"]), str(found["decisions"]), *shares, cost + (f" ({ratio:.2f}x)" if ratio else "")
    )
    console.print(table)
    for c in summary.comparisons:
        if not c.same_tools:
            recorded = ", ".join(n for n, _ in c.recorded) or "no tool"
            said = c.error or ", ".join(n for n, _ in c.candidate) or "no tool"
            console.print(f"run {c.run_id} step {c.seq}: recorded {recorded}; candidate {said}")
