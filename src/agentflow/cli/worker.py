"""``agentflow worker``: a worker process (run as many as you like on one database)."""

from __future__ import annotations

import asyncio
import signal

import typer
from prometheus_client import start_http_server

from agentflow.cli import task_dump
from agentflow.cli.common import IMPORTS_OPTION, console, run_with_engine
from agentflow.engine import Engine
from agentflow.runtime.metrics import REGISTRY


def worker(
    concurrency: int | None = typer.Option(None, "--concurrency", "-c", min=1, help="Runs at once."),
    imports: list[str] | None = IMPORTS_OPTION,
    name: str | None = typer.Option(None, help="Lease owner name (default host:pid:random)."),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", min=0, max=65535, help="Serve this worker's Prometheus counters here."
    ),
    metrics_host: str = typer.Option("127.0.0.1", "--metrics-host", help="Address for --metrics-port."),
    no_dispatch: bool = typer.Option(False, "--no-dispatch", help="Do not turn events into runs here."),
) -> None:
    """Claim and execute runs until SIGTERM or Ctrl-C (then finish current steps and stop)."""

    async def go(engine: Engine) -> None:
        w = engine.worker(concurrency=concurrency, dispatch=not no_dispatch, name=name)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, w.stop)
        task_dump.install(loop, f"agentflow worker {w.name}")  # kill -USR1: what each run awaits
        if metrics_port is not None:
            # The worker's own counters (claims, rescues, steps, fenced writes); the queue
            # gauges come from the API's /metrics, which reads them from the database.
            start_http_server(metrics_port, metrics_host, registry=REGISTRY)
            console.print(f"metrics on http://{metrics_host}:{metrics_port}/metrics", highlight=False)
        eager = (
            "; runs its events start run here eagerly"
            if engine.settings.eager_start and not no_dispatch
            else ""
        )
        console.print(
            f"worker [bold]{w.name}[/] running ({w.concurrency} at once{eager})",
            highlight=False,
            soft_wrap=True,
        )
        await w.run()
        console.print("worker stopped")

    run_with_engine(go, imports=imports, service=True)
