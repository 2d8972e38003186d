"""``agentflow nodes``: the node kinds a structured workflow can use."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from agentflow.cli.common import console, err_console
from agentflow.nodes.registry import node_kinds

app = typer.Typer(help="The node kinds structured workflows can use.", no_args_is_help=True)


@app.command("list")
def list_(
    as_json: bool = typer.Option(False, "--json", help="Print every kind with its JSON Schemas."),
) -> None:
    """List the node kinds: their ports and whether they join (no database needed)."""
    kinds = node_kinds()
    if as_json:
        typer.echo(json.dumps({"node_kinds": kinds}, indent=2))
        return
    table = Table("kind", "ports", "joins", "what it does")
    for kind in kinds:
        summary = kind["description"].split("\n\n")[0].replace("\n", " ")
        table.add_row(
            kind["kind"], ", ".join(kind["ports"]) or "-", "yes" if kind["joins"] else "no", summary
        )
    console.print(table)


@app.command("show")
def show(kind: str = typer.Argument(..., help="A node kind, such as tool.")) -> None:
    """Print one kind with its config, input and output JSON Schemas."""
    found = [k for k in node_kinds() if k["kind"] == kind]
    if not found:
        known = ", ".join(k["kind"] for k in node_kinds())
        err_console.print(f"[bold red]error[/] unknown_node_kind: no node kind {kind!r}; known: {known}")
        raise typer.Exit(1)
    typer.echo(json.dumps(found[0], indent=2))
