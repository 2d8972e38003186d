"""``agentflow serve``: the HTTP API and a worker in one process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import TYPE_CHECKING

import typer

from agentflow.cli import task_dump
from agentflow.cli.common import (
    IMPORTS_OPTION,
    console,
    err_console,
    fail,
    freeze_startup_heap,
    run_loop,
    settings_with,
)
from agentflow.core.errors import AgentflowError
from agentflow.engine import Engine
from agentflow.settings import Settings

if TYPE_CHECKING:
    from agentflow.api.server import ApiServer

logger = logging.getLogger(__name__)


def serve(
    host: str | None = typer.Option(None, help="Interface to listen on (default AGENTFLOW_HOST)."),
    port: int | None = typer.Option(None, min=0, max=65535, help="Port (default AGENTFLOW_PORT)."),
    imports: list[str] | None = IMPORTS_OPTION,
    concurrency: int | None = typer.Option(
        None, "--concurrency", "-c", min=1, help="Runs the worker executes at once."
    ),
    no_worker: bool = typer.Option(False, "--no-worker", help="Serve the API only; run workers apart."),
) -> None:
    """Serve the API (and, unless --no-worker, a worker) until SIGTERM or Ctrl-C.

    On the first signal the worker finishes its current steps, then the API stops. A second
    signal stops the API without waiting for open connections (the worker's steps still end).
    """
    settings = settings_with(imports)
    try:
        code = run_loop(
            run_server(
                settings,
                host=host or settings.host,
                port=settings.port if port is None else port,
                concurrency=concurrency,
                with_worker=not no_worker,
            )
        )
    except AgentflowError as exc:
        fail(exc)
        return
    raise typer.Exit(code)


async def run_server(
    settings: Settings, *, host: str, port: int, concurrency: int | None, with_worker: bool
) -> int:
    """Open the engine, serve the API and run a worker until a signal; return the exit code.

    Args:
        settings: the engine's settings.
        host / port: where the API listens.
        concurrency: the worker's concurrency (default from settings).
        with_worker: run a worker in this process.

    Returns:
        0 after a requested shutdown, 1 when the server failed to start or the worker died.

    Raises:
        ConfigError: ``setting_invalid`` for a malformed ``AGENTFLOW_CORS_ORIGINS`` or
            ``AGENTFLOW_TRUSTED_PROXIES`` (before anything starts).
    """
    # The API (FastAPI, its models, uvicorn) is imported here, not with the CLI: every other
    # command, ``agentflow worker`` above all, starts about a second sooner without it.
    import uvicorn

    from agentflow.api.app import create_app, resolve_auth
    from agentflow.api.browser_guard import http_policy
    from agentflow.api.server import ApiServer

    auth = resolve_auth(settings.api_auth, host)
    policy = http_policy(
        allowed_hosts=settings.allowed_hosts_list,
        cors_origins=settings.cors_origins_list,
        trusted_proxies=settings.trusted_proxies_list,
        listen_host=host,
        auth=auth,
    )
    if auth == "optional":
        warn_keyless(host, port)
    async with Engine.open(settings, wait=settings.startup_wait) as engine:
        freeze_startup_heap()
        config = uvicorn.Config(
            create_app(engine, auth=auth, policy=policy),
            host=host,
            port=port,
            lifespan="off",
            timeout_graceful_shutdown=30,
            # The app decides whose X-Forwarded-For to believe (AGENTFLOW_TRUSTED_PROXIES);
            # uvicorn's own rewrite would hide the proxy's address from it.
            proxy_headers=False,
        )
        server = ApiServer(config)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            if stop.is_set():  # a second signal: stop serving at once
                server.force_exit = True
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        task_dump.install(loop, "agentflow serve")  # kill -USR1: what each task awaits
        try:
            try:
                api = await server.serve_until_started()
            except RuntimeError as exc:
                err_console.print(f"[bold red]error[/] {exc}")
                return 1
            return await _supervise(engine, server, api, stop, concurrency, with_worker)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)


def warn_keyless(host: str, port: int) -> None:
    """Say loudly that the API serves calls without a key, and what that exposes."""
    from agentflow.api.hosts import is_loopback

    who = (
        "Every program on this machine can call it, and so can anyone whose requests a reverse"
        " proxy on this machine relays"
        if is_loopback(host)
        else f"Anyone who can reach {host}:{port} can call it"
    )
    err_console.print(
        f"[bold yellow]warning[/] the API accepts calls without an API key (AGENTFLOW_API_AUTH"
        f" resolves to optional). {who}. Unless this is a personal development server, set"
        " AGENTFLOW_API_AUTH=required and create keys with 'agentflow keys create'. See docs/security.md.",
        highlight=False,
        soft_wrap=True,  # one line: log scrapers and tests grep for it
    )


async def _supervise(
    engine: Engine,
    server: ApiServer,
    api: asyncio.Task[None],
    stop: asyncio.Event,
    concurrency: int | None,
    with_worker: bool,
) -> int:
    """Run until a signal or a failure; stop the worker first, then the API."""
    worker = engine.worker(concurrency=concurrency) if with_worker else None
    work = asyncio.create_task(worker.run(), name="agentflow-worker") if worker else None
    if worker is not None:
        eager = (
            "; runs started here (API, webhooks, events) run here eagerly"
            if engine.settings.eager_start
            else ""
        )
        console.print(
            f"worker [bold]{worker.name}[/] running ({worker.concurrency} at once{eager})",
            highlight=False,
            soft_wrap=True,  # one line, however long the host name (logs are read by line)
        )
    stopping = asyncio.create_task(stop.wait())
    watched = {stopping, api} | ({work} if work else set())
    done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
    code = 0 if stopping in done else 1
    if worker is not None and work is not None:
        if not work.done():
            console.print("stopping: the worker finishes its current steps first")
        worker.stop()  # stop claiming; current steps finish and their runs are released
        try:
            await work
        except Exception:
            logger.exception("the worker failed")
            code = 1
    server.should_exit = True
    try:
        await api
    except Exception:
        logger.exception("the API server failed")
        code = 1
    stopping.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await stopping
    return code
