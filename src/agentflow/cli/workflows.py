"""``agentflow workflows``: publish and inspect workflow configs."""

from __future__ import annotations

import enum
from pathlib import Path

import typer
from rich.table import Table

from agentflow.cli.common import console, run_with_engine
from agentflow.core.references import KINDS
from agentflow.engine import Engine

app = typer.Typer(help="Publish, list, retire and delete workflows.", no_args_is_help=True)

ResourceKindOption = enum.Enum("ResourceKindOption", {k: k for k in KINDS}, type=str)  # type: ignore[misc]
"""typer's choices need an enum."""


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
def list_(archived: bool = typer.Option(False, "--archived", help="List the archived ones instead.")) -> None:
    """List workflows."""

    async def go(engine: Engine) -> None:
        table = Table("name", "kind", "latest", "draft", "enabled", "id", "updated")
        for wf in await engine.list_workflows(archived=archived):
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


_FORCE = typer.Option(False, "--force", help="Even though other workflows start it.")


@app.command("enable")
def enable(workflow: str = typer.Argument(..., help="Name or id.")) -> None:
    """Let triggers and schedules start the workflow again."""
    _set_flags(workflow, "enabled", enabled=True)


@app.command("disable")
def disable(workflow: str = typer.Argument(..., help="Name or id."), force: bool = _FORCE) -> None:
    """Stop triggers and schedules starting it (refused while other workflows start it)."""
    _set_flags(workflow, "disabled", enabled=False, force=force)


@app.command("archive")
def archive(workflow: str = typer.Argument(..., help="Name or id."), force: bool = _FORCE) -> None:
    """Disable it and hide it from the list; nothing starts it until it is unarchived."""
    _set_flags(workflow, "archived", archived=True, force=force)


@app.command("unarchive")
def unarchive(workflow: str = typer.Argument(..., help="Name or id.")) -> None:
    """Bring it back to the list, still disabled (``enable`` it to start it again)."""
    _set_flags(workflow, "unarchived", archived=False)


@app.command("delete")
def delete(
    workflow: str = typer.Argument(..., help="Name or id."),
    force: bool = _FORCE,
    yes: bool = typer.Option(False, "--yes", help="Do not ask for confirmation."),
) -> None:
    """Delete it with its versions, finished runs, triggers and schedules (refused while a run of
    it is active)."""
    if not yes:
        typer.confirm(f"Delete workflow {workflow} with its versions and runs?", abort=True)

    async def go(engine: Engine) -> None:
        await engine.delete_workflow(workflow, force=force)
        console.print(f"deleted workflow {workflow}")

    run_with_engine(go)


@app.command("references")
def references(
    kind: ResourceKindOption = typer.Argument(
        ..., help="credential, employee, person, role, tool or workflow."
    ),
    name: str = typer.Argument(..., help="The resource's name."),
) -> None:
    """Which workflows use a resource (their latest versions, and older ones with active runs)."""

    async def go(engine: Engine) -> None:
        found = await engine.resources.references(kind.value, name)
        if not found:
            console.print(f"nothing uses {kind.value} {name}")
            return
        table = Table("workflow", "version", "latest", "enabled", "active runs")
        for ref in found:
            table.add_row(
                ref.workflow, str(ref.version), _yes(ref.latest), _yes(ref.enabled), str(ref.active_runs)
            )
        console.print(table)

    run_with_engine(go)


def _set_flags(
    workflow: str,
    done: str,
    *,
    enabled: bool | None = None,
    archived: bool | None = None,
    force: bool = False,
) -> None:
    async def go(engine: Engine) -> None:
        changed = await engine.set_flags(workflow, enabled=enabled, archived=archived, force=force)
        console.print(f"{done} [bold]{changed.name}[/]")

    run_with_engine(go)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
