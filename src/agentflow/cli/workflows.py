"""``agentflow workflows``: publish and inspect workflow configs."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from agentflow.cli.common import console, run_with_engine
from agentflow.engine import Engine

app = typer.Typer(help="Publish and list workflows.", no_args_is_help=True)


@app.command("apply")
def apply(
    files: list[Path] = typer.Argument(..., exists=True, dir_okay=False, help="YAML/JSON configs."),
    draft: bool | None = typer.Option(None, "--draft/--no-draft", help="Set the draft flag."),
) -> None:
    """Publish each config: a new version unless its content is unchanged."""

    async def go(engine: Engine) -> None:
        for path in files:
            published = await engine.publish_workflow(path, draft=draft)
            wf, version = published.workflow, published.version
            what = "published" if published.created else "unchanged"
            console.print(
                f"{what} [bold]{wf.name}[/] ({wf.kind}) version {version.version}"
                f" [dim]{wf.id} {version.content_hash[:12]}[/]"
            )

    run_with_engine(go)


@app.command("list")
def list_() -> None:
    """List workflows."""

    async def go(engine: Engine) -> None:
        table = Table("name", "kind", "latest", "draft", "enabled", "id", "updated")
        for wf in await engine.list_workflows():
            table.add_row(
                wf.name, wf.kind, str(wf.latest_version), _yes(wf.draft), _yes(wf.enabled),
                str(wf.id), wf.updated_at.strftime("%Y-%m-%d %H:%M:%S"),
            )  # fmt: skip
        console.print(table)

    run_with_engine(go)


@app.command("show")
def show(
    workflow: str = typer.Argument(..., help="Name or id."),
    version: int | None = typer.Option(None, help="A version (default: the latest)."),
) -> None:
    """Print a version's config as JSON."""

    async def go(engine: Engine) -> None:
        record = await engine.get_version(workflow, version)
        console.print_json(data=record.config)

    run_with_engine(go)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
