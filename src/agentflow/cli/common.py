"""What every command shares: opening the engine, printing errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import typer
from rich.console import Console

from agentflow.core.errors import AgentflowError
from agentflow.engine import Engine
from agentflow.settings import Settings

T = TypeVar("T")
console = Console()
err_console = Console(stderr=True)

IMPORTS_OPTION = typer.Option(
    None, "--import", "-i", help="Module to import first (where your tools are). Repeatable."
)


def settings_with(imports: list[str] | None = None) -> Settings:
    """Settings from the environment plus ``--import`` modules."""
    settings = Settings()
    if imports:
        settings = settings.model_copy(update={"imports": ",".join([*settings.import_modules, *imports])})
    return settings


def run_with_engine(
    action: Callable[[Engine], Awaitable[T]],
    *,
    imports: list[str] | None = None,
    settings: Settings | None = None,
) -> T:
    """Open the engine (on ``settings``, by default from the environment), run ``action``, close;
    turn agentflow errors into exit code 1."""

    async def go() -> T:
        async with Engine.open(settings or settings_with(imports)) as engine:
            return await action(engine)

    try:
        return asyncio.run(go())
    except AgentflowError as exc:
        fail(exc)
        raise  # unreachable: fail() exits


def fail(exc: AgentflowError) -> None:
    """Print a structured error and exit 1."""
    err_console.print(f"[bold red]error[/] [red]{exc.code}[/]: {exc.info.message}")
    for item in exc.info.details.get("errors", []):
        err_console.print(f"  - {item['path'] or '(root)'}: {item['message']}")
    if exc.info.solution:
        err_console.print(f"[dim]{exc.info.solution}[/]")
    raise typer.Exit(1)


def parse_json_option(text: str | None, name: str) -> Any:
    """Parse a JSON command-line value, with a clear error."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        err_console.print(f"[bold red]error[/] invalid_json: {name} is not valid JSON ({exc})")
        raise typer.Exit(2) from None
