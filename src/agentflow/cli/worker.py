"""``agentflow worker``: a worker process (run as many as you like on one database)."""

from __future__ import annotations

import asyncio
import signal

import typer

from agentflow.cli.common import IMPORTS_OPTION, console, run_with_engine
from agentflow.engine import Engine


def worker(
    concurrency: int | None = typer.Option(None, "--concurrency", "-c", min=1, help="Runs at once."),
    imports: list[str] | None = IMPORTS_OPTION,
    name: str | None = typer.Option(None, help="Lease owner name (default host:pid:random)."),
) -> None:
    """Claim and execute runs until SIGTERM or Ctrl-C (then finish current steps and stop)."""

    async def go(engine: Engine) -> None:
        w = engine.worker(concurrency=concurrency)
        if name:
            w.name = name
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, w.stop)
        console.print(f"worker [bold]{w.name}[/] running ({w.concurrency} at once)", highlight=False)
        await w.run()
        console.print("worker stopped")

    run_with_engine(go, imports=imports)
