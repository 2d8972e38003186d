"""``agentflow worker`` subprocesses for the workloads, and their memory.

Workers run exactly as an operator runs them (``agentflow worker --import MODULE``), in
their own processes, on the benchmark database; the benchmark process only starts runs
and reads timestamps.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

TOOLS_MODULE = "agentflow.bench.tools"
CLI_WORKER = ("-c", "from agentflow.cli import main; main()", "worker", "--import", TOOLS_MODULE)
"""The interpreter arguments of ``agentflow worker --import agentflow.bench.tools``."""
_READY_TIMEOUT = 60.0
_STOP_TIMEOUT = 20.0


class WorkerFailed(RuntimeError):
    """A worker process did not start, or died during a workload."""


@dataclass
class WorkerGroup:
    """Worker processes sharing one database.

    Attributes:
        concurrency: runs each worker executes at once (its ``--concurrency``).
        processes: the running processes.
        logs: each worker's stderr (its log), for error messages.
    """

    concurrency: int
    processes: list[asyncio.subprocess.Process] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        """The workers' process ids."""
        return [p.pid for p in self.processes]

    def rss_mb(self) -> list[float]:
        """Each worker's resident memory, in MiB."""
        return [psutil.Process(pid).memory_info().rss / 2**20 for pid in self.pids]

    def cpu_seconds(self) -> float:
        """CPU time the workers have used so far (user + system, all of them), in seconds."""
        return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in self.pids)

    def check_alive(self) -> None:
        """Raise ``WorkerFailed`` if a worker has exited."""
        for process, log in zip(self.processes, self.logs, strict=True):
            if process.returncode is not None:
                raise WorkerFailed(f"worker {process.pid} exited ({process.returncode}): {log_tail(log)}")


@asynccontextmanager
async def worker_group(
    url: str,
    count: int,
    concurrency: int,
    *,
    program: Sequence[str] = CLI_WORKER,
    settings: Mapping[str, str] | None = None,
) -> AsyncIterator[WorkerGroup]:
    """Start ``count`` workers on ``url``, wait until each is ready, stop them at the end.

    ``program`` is what the interpreter runs, before ``--concurrency N``: ``agentflow worker``
    by default (A1 runs ``agentflow.bench.agent_worker``, the same worker with a scripted model).
    ``settings``: more environment for them (``AGENTFLOW_*``).
    """
    group = WorkerGroup(concurrency)
    log_dir = Path(tempfile.mkdtemp(prefix="agentflow-bench-workers-"))
    env = {**os.environ, "AGENTFLOW_DATABASE_URL": url, "COLUMNS": "200", **(settings or {})}
    try:
        for index in range(count):
            log = log_dir / f"worker-{index}.log"
            with log.open("wb") as stderr:
                process = await asyncio.create_subprocess_exec(
                    sys.executable, *program, "--concurrency", str(concurrency),
                    stdout=asyncio.subprocess.PIPE, stderr=stderr, env=env,
                )  # fmt: skip
            group.processes.append(process)
            group.logs.append(log)
        await asyncio.gather(*(_ready(p, log) for p, log in zip(group.processes, group.logs, strict=True)))
        yield group
    finally:
        await asyncio.gather(*(stop_process(p) for p in group.processes))
        shutil.rmtree(log_dir, ignore_errors=True)


async def _ready(process: asyncio.subprocess.Process, log: Path) -> None:
    """Wait for the worker's ``running`` line (printed once it has connected)."""
    assert process.stdout is not None
    deadline = time.monotonic() + _READY_TIMEOUT
    while True:
        try:
            line = await asyncio.wait_for(process.stdout.readline(), deadline - time.monotonic())
        except TimeoutError:
            raise WorkerFailed(f"worker {process.pid} was not ready within {_READY_TIMEOUT:g}s") from None
        if not line:
            await process.wait()
            raise WorkerFailed(f"worker {process.pid} exited ({process.returncode}): {log_tail(log)}")
        if b" running " in line:
            return


async def stop_process(process: asyncio.subprocess.Process) -> None:
    """SIGTERM (a worker finishes its steps and releases its runs; a server finishes its
    requests), then SIGKILL after 20 s."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.communicate(), _STOP_TIMEOUT)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


def log_tail(log: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a process's log, for error messages."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


class RssSampler:
    """Samples the workers' resident memory in the background (MiB, max over workers)."""

    def __init__(self, group: WorkerGroup, interval: float = 0.25) -> None:
        self._group = group
        self._interval = interval
        self.samples: list[tuple[float, float]] = []  # (monotonic time, MiB)
        self.marks: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    def now(self) -> float:
        """The largest worker RSS at this moment (MiB)."""
        return max(self._group.rss_mb())

    def mark(self, label: str) -> float:
        """Record the RSS now under ``label``; return it."""
        self.marks[label] = value = self.now()
        return value

    @property
    def peak(self) -> float:
        """The largest sample or mark so far (MiB)."""
        return max([mib for _t, mib in self.samples] + list(self.marks.values()), default=0.0)

    async def __aenter__(self) -> RssSampler:
        self._task = asyncio.create_task(self._loop(), name="bench-rss")
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(psutil.Error):
                self.samples.append((time.monotonic(), self.now()))
            await asyncio.sleep(self._interval)
