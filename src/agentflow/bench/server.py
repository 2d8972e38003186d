"""An ``agentflow serve`` subprocess for the HTTP workloads.

The server runs exactly as an operator runs it, in its own process, on the benchmark
database; the benchmark talks to it over HTTP on the loopback interface like any client.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import psutil

from agentflow.bench.processes import log_tail, stop_process
from agentflow.core.frozen import frozen

_READY_TIMEOUT = 60.0


class ServerFailed(RuntimeError):
    """The server process did not start, or died during a workload."""


@frozen
class ApiProcess:
    """A running ``agentflow serve`` process.

    Attributes:
        base_url: where it listens, e.g. ``http://127.0.0.1:8123``.
        process: the process.
        log: its stdout and stderr, for error messages.
        worker: whether it runs a worker (and with it the dispatcher).
    """

    base_url: str
    process: asyncio.subprocess.Process
    log: Path
    worker: bool

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the server process has used so far."""
        times = psutil.Process(self.process.pid).cpu_times()
        return float(times.user + times.system)

    def check_alive(self) -> None:
        """Raise ``ServerFailed`` if the server has exited."""
        if self.process.returncode is not None:
            raise ServerFailed(
                f"server {self.process.pid} exited ({self.process.returncode}): {log_tail(self.log)}"
            )


@asynccontextmanager
async def api_server(url: str, *, worker: bool = False) -> AsyncIterator[ApiProcess]:
    """Start ``agentflow serve`` on database ``url`` and wait until it answers ``/readyz``.

    Args:
        url: the benchmark database.
        worker: also run the server's in-process worker and dispatcher (``--no-worker``
            when False: the server then only answers HTTP).

    Raises:
        ServerFailed: it exited or did not become ready within a minute.
    """
    port = _free_port()
    log_dir = Path(tempfile.mkdtemp(prefix="agentflow-bench-server-"))
    log = log_dir / "serve.log"
    env = {**os.environ, "AGENTFLOW_DATABASE_URL": url, "COLUMNS": "200"}
    args = ["serve", "--host", "127.0.0.1", "--port", str(port)]
    args += [] if worker else ["--no-worker"]
    process: asyncio.subprocess.Process | None = None
    try:
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-c", "from agentflow.cli import main; main()", *args,
                stdout=out, stderr=asyncio.subprocess.STDOUT, env=env,
            )  # fmt: skip
        server = ApiProcess(f"http://127.0.0.1:{port}", process, log, worker)
        await _ready(server)
        yield server
    finally:
        if process is not None:
            await stop_process(process)
        shutil.rmtree(log_dir, ignore_errors=True)


def _free_port() -> int:
    # The port is free now; another program could take it before the server binds it, in
    # which case the server exits and _ready reports its log.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def _ready(server: ApiProcess) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT
    async with httpx.AsyncClient(base_url=server.base_url, timeout=5) as client:
        while True:
            server.check_alive()
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise ServerFailed(
                    f"server {server.process.pid} was not ready within {_READY_TIMEOUT:g}s:"
                    f" {log_tail(server.log)}"
                )
            await asyncio.sleep(0.1)
