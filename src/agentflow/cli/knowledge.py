"""``agentflow knowledge``: add, list, search and plan from the playbooks behind ``generate_plan``."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from agentflow.cli.common import console, err_console, run_with_engine
from agentflow.engine import Engine
from agentflow.knowledge.documents import suggest_title
from agentflow.knowledge.markdown import plain
from agentflow.knowledge.plans import Plan

app = typer.Typer(
    help="The knowledge base behind generate_plan: playbooks, search and plans.", no_args_is_help=True
)

_SNIPPET = 240


@app.command("add")
def add(
    files: list[Path] = typer.Argument(..., help="Markdown or text files, one document each."),
    title: str | None = typer.Option(
        None, "--title", "-t", help="The title (one file only); default: the first heading or the file name."
    ),
    tags: list[str] = typer.Option([], "--tag", help="A scenario word or phrase it is for. Repeatable."),
) -> None:
    """Add documents (a document with the same title is replaced)."""
    if title is not None and len(files) > 1:
        err_console.print("[bold red]error[/] usage: --title needs exactly one file")
        raise typer.Exit(2)
    texts = [(path, _read(path)) for path in files]

    async def go(engine: Engine) -> None:
        for path, text in texts:
            name = title or suggest_title(text) or path.stem
            record = await engine.knowledge.add(name, text, tags=tags)
            console.print(
                f"stored “{escape(record.title)}” ({record.id}, {record.chunks} chunks,"
                f" tags: {escape(', '.join(record.tags)) or 'none'})"
            )

    run_with_engine(go)


@app.command("list")
def list_() -> None:
    """List the documents: the bundled playbooks, then yours."""

    async def go(engine: Engine) -> None:
        table = Table("title", "source", "chunks", "tags", "updated")
        table.add_column("document", no_wrap=True, min_width=36)  # whole: 'knowledge delete' needs it
        for doc in await engine.knowledge.list():
            tags = ", ".join(doc.tags)
            tags = tags if len(tags) <= 60 else tags[:59] + "…"
            updated = f"{doc.updated_at:%Y-%m-%d %H:%M}"
            table.add_row(escape(doc.title), doc.source, str(doc.chunks), escape(tags), updated, str(doc.id))
        console.print(table)

    run_with_engine(go)


@app.command("search")
def search(
    scenario: str = typer.Argument(..., help="A few words, e.g. 'get well plan'."),
    limit: int = typer.Option(5, "--limit", "-n", min=1, max=50),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show the passages that best match a scenario, with their scores."""

    async def go(engine: Engine) -> None:
        passages = await engine.knowledge.search(scenario, limit=limit)
        if as_json:
            typer.echo(json.dumps({"passages": [p.to_json() for p in passages]}, indent=2))
            return
        if not passages:
            console.print(f"no passage matches “{escape(scenario)}”")
        for p in passages:
            where = f"{escape(p.title)} › {escape(p.heading or '')}"
            console.print(f"[bold]{p.score:.3f}[/]  {where}  [dim]{p.document_id}[/]")
            text = plain(p.text)
            console.print("       " + escape(text if len(text) <= _SNIPPET else text[: _SNIPPET - 1] + "…"))

    run_with_engine(go)


@app.command("plan")
def plan(
    scenario: str = typer.Argument(..., help="A few words, e.g. 'expansion'."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (what generate_plan returns)."),
) -> None:
    """Compose a plan for a scenario from the best playbook, with its citations."""

    async def go(engine: Engine) -> None:
        found = await engine.knowledge.plan(scenario)
        if as_json:
            typer.echo(json.dumps(found.to_json(), indent=2))
        else:
            _print_plan(found)

    run_with_engine(go)


@app.command("delete")
def delete(document_id: str = typer.Argument(..., help="The document id (see 'knowledge list').")) -> None:
    """Delete one of your documents (bundled playbooks stay; override them by title)."""

    async def go(engine: Engine) -> None:
        record = await engine.knowledge.delete(document_id)
        console.print(f"deleted “{escape(record.title)}” ({record.id})")

    run_with_engine(go)


def _print_plan(found: Plan) -> None:
    console.print(f"[bold]{escape(found.summary)}[/]")
    for step in found.steps:
        meta = " · ".join(x for x in (step.owner, step.due_in) if x)
        shown = f"[cyan]\\[{escape(meta)}][/] " if meta else ""
        console.print(f"  {step.n}. {shown}{escape(step.action)}")
    _print_list("Signals to watch", found.signals)
    _print_list("Done when", found.done_when)
    if found.citations:
        console.print("[dim]Sources:[/]")
        for c in found.citations:
            console.print(f"[dim]  {escape(c.title)} › {escape(c.heading or '')} ({c.document_id})[/]")
    if found.related:
        console.print("[dim]Related: " + escape("; ".join(r.title for r in found.related)) + "[/]")


def _print_list(name: str, items: tuple[str, ...]) -> None:
    if items:
        console.print(f"{name}:")
        for item in items:
            console.print(f"  - {escape(item)}")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        err_console.print(f"[bold red]error[/] file_unreadable: {escape(str(path))}: {escape(str(exc))}")
        raise typer.Exit(2) from None
