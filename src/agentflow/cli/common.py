"""What every command shares: opening the engine, printing errors."""

from __future__ import annotations

import asyncio
import gc
import importlib
import json
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from agentflow.core.errors import AgentflowError, ConfigError
from agentflow.engine import Engine
from agentflow.settings import Settings

T = TypeVar("T")
console = Console()
err_console = Console(stderr=True)

IMPORTS_OPTION = typer.Option(
    None, "--import", "-i", help="Module to import first (where your tools are). Repeatable."
)


def check_settings() -> None:
    """Exit 2 with one line per bad ``AGENTFLOW_*`` variable (which, why, what it got)
    instead of a traceback, before any command reads the settings."""
    try:
        Settings()
    except ValidationError as exc:
        for error in exc.errors():
            name = "AGENTFLOW_" + "_".join(str(part) for part in error["loc"]).upper()
            # Never echo what may hold a secret (a key, a token, a URL with a password).
            secret = any(part in name for part in _SECRET_PARTS)
            got = "" if secret else f" (got {error.get('input')!r})"
            err_console.print(
                f"error: {name}: {error['msg']}{got}", markup=False, highlight=False, soft_wrap=True
            )
        raise typer.Exit(2) from None


_SECRET_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "URL", "DSN")


def settings_with(imports: list[str] | None = None) -> Settings:
    """Settings from the environment plus ``--import`` modules, which are imported now.

    Exits with a one-line ``import_failed`` error when one of them cannot be found.
    """
    settings = Settings()
    if imports:
        settings = settings.model_copy(update={"imports": ",".join([*settings.import_modules, *imports])})
    import_modules(settings.import_modules)
    return settings


def import_modules(names: list[str]) -> None:
    """Import the user's modules (``--import``, ``AGENTFLOW_IMPORTS``) from the working directory
    or the Python path; a module that is not there exits 1 with one line saying where we looked.
    """
    # A console script's path starts with its own bin directory, not the working directory
    # (``python -m`` and ``python -c`` put the latter first): ``--import mytools`` next to
    # mytools.py must work the same way.
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # Only the module asked for (or a package above it): a module that *it* imports
            # and is missing is a bug in that module, whose traceback says where.
            if exc.name is None or not (name == exc.name or name.startswith(exc.name + ".")):
                raise
            err_console.print(
                f"[bold red]error[/] [red]import_failed[/]: no module named {exc.name!r} (from --import"
                f" {name!r}) in the working directory {here} or on the Python path; run from the"
                " directory that holds it, or add that directory to PYTHONPATH.",
                soft_wrap=True,
                highlight=False,
            )
            raise typer.Exit(1) from None


def run_with_engine(
    action: Callable[[Engine], Awaitable[T]],
    *,
    imports: list[str] | None = None,
    settings: Settings | None = None,
    service: bool = False,
) -> T:
    """Open the engine (on ``settings``, by default from the environment), run ``action``, close;
    turn agentflow errors into exit code 1. A ``service`` (a worker) waits up to
    ``startup_wait`` seconds for a database that is down or restarting; a command fails at once."""

    async def go() -> T:
        chosen = settings or settings_with(imports)
        async with Engine.open(chosen, wait=chosen.startup_wait if service else 0.0) as engine:
            if service:
                freeze_startup_heap()
            return await action(engine)

    try:
        return run_async(go)
    except AgentflowError as exc:
        fail(exc)
        raise  # unreachable: fail() exits


def freeze_startup_heap() -> None:
    """Keep what a long-running process made while starting (modules, its tools, the engine)
    out of the garbage collector's full passes from now on (``gc.freeze``).

    Those passes walk every tracked object; in a worker under load each one stalled every run
    of the process for 50-70 ms (eight in 16,000 runs), 2-5 ms once the start-up heap was frozen.
    Only the commands that own their process do this, never the library.
    """
    gc.freeze()


EVENT_LOOPS = ("auto", "uvloop", "asyncio")
_loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None


def choose_event_loop(choice: str) -> None:
    """Run this process's commands on the event loop ``AGENTFLOW_EVENT_LOOP`` names: ``uvloop``
    (libuv: W1 ran 13-20 % more runs per second on it), ``asyncio`` (the standard library's), or
    ``auto`` (uvloop when it is installed, as it is on Linux and macOS with CPython).

    Raises:
        ConfigError: ``event_loop_invalid`` for another value, or ``uvloop`` where it is not
            installed.
    """
    global _loop_factory
    chosen = choice.strip().lower() or "auto"
    if chosen not in EVENT_LOOPS:
        raise ConfigError(
            "event_loop_invalid",
            f"AGENTFLOW_EVENT_LOOP is {chosen!r}; use one of {', '.join(EVENT_LOOPS)}",
            solution="Unset AGENTFLOW_EVENT_LOOP (auto) or set it to asyncio.",
        )
    _loop_factory = None
    if chosen == "asyncio":
        return
    try:
        import uvloop
    except ImportError:
        if chosen == "uvloop":
            raise ConfigError(
                "event_loop_invalid",
                "AGENTFLOW_EVENT_LOOP is uvloop, which is not installed here (it needs CPython off Windows)",
                solution="pip install uvloop, or unset AGENTFLOW_EVENT_LOOP.",
            ) from None
        return
    _loop_factory = uvloop.new_event_loop


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a new event loop of the chosen kind (``choose_event_loop``)."""
    with asyncio.Runner(loop_factory=_loop_factory) as runner:
        return runner.run(main)


def run_async(main: Callable[[], Awaitable[T]]) -> T:
    """``asyncio.run(main())``, where SIGTERM cancels ``main`` and then exits 143.

    Python's default SIGTERM ends the process on the spot: no ``finally``, no ``atexit``, so
    an embedded PostgreSQL this process opened would stay registered to it and run on. Here
    cancellation unwinds ``main`` (the engine closes, the server is released). A command that
    handles SIGTERM itself (``worker``) installs its own handler, which replaces this one.
    """
    terminated = False

    async def guarded() -> T:
        task = asyncio.current_task()
        assert task is not None

        def on_sigterm() -> None:
            nonlocal terminated
            terminated = True
            task.cancel()

        if threading.current_thread() is threading.main_thread():
            # Signals reach the main thread only; a command run from another (an embedding
            # program, the in-process CLI tests) leaves them to that program.
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_sigterm)
        return await main()

    try:
        return run_loop(guarded())
    except asyncio.CancelledError:
        if terminated:
            raise typer.Exit(128 + signal.SIGTERM) from None
        raise


def fail(exc: AgentflowError) -> None:
    """Print a structured error and exit 1."""
    # Messages are text, not markup: "pip install 'agentflow[extra]'" must print as written.
    err_console.print(f"[bold red]error[/] [red]{exc.code}[/]: {escape(exc.info.message)}")
    for item in exc.info.details.get("errors", []):
        err_console.print(f"  - {escape(str(item['path'] or '(root)'))}: {escape(str(item['message']))}")
    if exc.info.solution:
        err_console.print(f"[dim]{escape(exc.info.solution)}[/]")
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
