"""Worker processes for fault tests: start, kill (-9), freeze, resume, restart, watch.

Each worker is ``agentflow -v worker`` in a fresh interpreter with its own environment
(database URL, lease TTL, failpoints, the recorder's URL), its stdout and stderr in
files, and a lease-owner name the test chose, so the database rows it holds can be
found after it dies.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import psutil

REPO = Path(__file__).resolve().parents[2]
_MAIN = "from agentflow.cli import main; main()"


def worker_env(
    database_url: str, recorder_url: str | None = None, *, measured: bool = False, **settings: object
) -> dict[str, str]:
    """The environment of a worker process.

    ``settings`` are ``AGENTFLOW_<NAME>`` values (``lease_ttl=2`` sets
    ``AGENTFLOW_LEASE_TTL=2``); inherited ``AGENTFLOW_*`` variables are dropped so the
    caller's shell cannot change the test. Coverage's variables are dropped too unless
    ``measured``: a traced worker is slower, and most fault tests judge timing.
    """
    dropped = ("AGENTFLOW_",) if measured else ("AGENTFLOW_", "COVERAGE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.update(
        {
            "AGENTFLOW_DATABASE_URL": database_url,
            "AGENTFLOW_POOL_MIN_SIZE": "1",
            "AGENTFLOW_POOL_MAX_SIZE": "4",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if recorder_url is not None:
        env["AGENTFLOW_TEST_RECORDER"] = recorder_url
    for name, value in settings.items():
        env[f"AGENTFLOW_{name.upper()}"] = str(value)
    return env


class WorkerProcess:
    """One ``agentflow worker`` process.

    Args:
        name: its lease-owner name (``runs.lease_owner``).
        env: its environment (see ``worker_env``).
        log_dir: where ``<name>.out`` and ``<name>.err`` go.
        concurrency: runs at once.
        imports: modules with the tools.
        prelude: Python run in the process before the CLI (a negative control's sabotage).
    """

    def __init__(
        self,
        name: str,
        env: Mapping[str, str],
        log_dir: Path,
        *,
        concurrency: int = 4,
        imports: tuple[str, ...] = ("tests.support.fault_tools",),
        prelude: str = "",
    ) -> None:
        self.name = name
        self.env = dict(env)
        self.out_path = log_dir / f"{name}.out"
        self.err_path = log_dir / f"{name}.err"
        main = f"{prelude}\n{_MAIN}" if prelude else _MAIN
        args = [sys.executable, "-c", main, "-v", "worker", "--concurrency", str(concurrency)]
        args += ["--name", name]
        for module in imports:
            args += ["--import", module]
        with self.out_path.open("wb") as out, self.err_path.open("wb") as err:
            self.proc = subprocess.Popen(args, cwd=REPO, env=self.env, stdout=out, stderr=err)
        self.started_at = time.monotonic()
        self.killed_by_test = False
        self._ready = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ready(self) -> bool:
        """Whether the worker printed its banner (it is connected and listening)."""
        if not self._ready:
            self._ready = "running (" in self.out_path.read_text(errors="replace")
        return self._ready

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Block until the worker printed its banner (it is connected and listening)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready():
                return
            if not self.alive():
                raise RuntimeError(f"worker {self.name} exited early:\n{self.stderr()[-3000:]}")
            time.sleep(0.02)
        raise TimeoutError(f"worker {self.name} not ready after {timeout}s:\n{self.stderr()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.alive():
            self.killed_by_test = True
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def freeze(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM (graceful), then SIGKILL after ``timeout``; always reaps."""
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait(10)

    def rss(self) -> int:
        """Resident set size in bytes."""
        return int(psutil.Process(self.pid).memory_info().rss)

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")


@dataclass
class Death:
    """A worker process that ended while the test still needed it.

    Attributes:
        name: its lease-owner name.
        at: ``time.monotonic()`` when the death was noticed (at most one watch period
            after it happened) or when the test killed it.
        cause: ``test_kill``, ``failpoint:<name>`` (it died of SIGKILL while that
            failpoint was armed), ``sigkill`` (SIGKILL with no failpoint armed: a tool
            killed it) or ``exit:<code>``.
    """

    name: str
    at: float
    cause: str


@dataclass
class Supervisor:
    """Keeps ``slots`` workers alive: restarts each one that dies, records the deaths.

    ``spawn(generation)`` returns a new ``WorkerProcess`` together with the failpoint
    spec it was armed with (used to attribute its death). ``on_death`` is called with
    each death right after it is noticed (before the replacement starts).
    """

    spawn: Callable[[int], tuple[WorkerProcess, str]]
    slots: int
    on_death: Callable[[WorkerProcess, Death], None] | None = None
    watch_period: float = 0.02
    workers: list[WorkerProcess] = field(default_factory=list)
    armed: dict[str, str] = field(default_factory=dict)
    deaths: list[Death] = field(default_factory=list)
    everyone: list[WorkerProcess] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)  # exits not caused by a signal
    generation: int = 0

    def start(self) -> None:
        for _ in range(self.slots):
            self.workers.append(self._spawn())

    def _spawn(self) -> WorkerProcess:
        worker, armed = self.spawn(self.generation)
        self.generation += 1
        self.armed[worker.name] = armed
        self.everyone.append(worker)
        return worker

    def kill(self, worker: WorkerProcess) -> None:
        """SIGKILL ``worker`` now, record its death and start its replacement."""
        worker.kill()
        self._buried(worker, time.monotonic())

    def check(self) -> None:
        """Notice dead workers and replace them."""
        now = time.monotonic()
        for worker in list(self.workers):
            if not worker.alive():
                self._buried(worker, now)

    def _buried(self, worker: WorkerProcess, at: float) -> None:
        if worker not in self.workers:
            return
        code = worker.proc.wait(10)
        if worker.killed_by_test:
            cause = "test_kill"
        elif code == -signal.SIGKILL and self.armed.get(worker.name):
            cause = f"failpoint:{self.armed[worker.name]}"
        elif code == -signal.SIGKILL:
            cause = "sigkill"
        else:
            cause = f"exit:{code}"
        death = Death(worker.name, at, cause)
        self.deaths.append(death)
        if cause.startswith("exit:"):
            self.crashes.append(f"{worker.name} {cause}: {worker.stderr()[-1500:]}")
        if self.on_death is not None:
            self.on_death(worker, death)
        self.workers[self.workers.index(worker)] = self._spawn()

    async def watch(self, stop: asyncio.Event) -> None:
        """Run ``check`` every ``watch_period`` seconds until ``stop`` is set."""
        while not stop.is_set():
            self.check()
            await asyncio.sleep(self.watch_period)

    def stop_all(self) -> None:
        """Stop every worker this supervisor ever started (always call it in finally)."""
        for worker in self.everyone:
            try:
                worker.stop()
            except Exception:  # pragma: no cover - best effort cleanup
                worker.proc.kill()


async def frozen_holding_runs(worker: WorkerProcess, pool: asyncpg.Pool) -> bool:
    """Freeze ``worker`` (SIGSTOP); True, leaving it frozen, if it holds ``in_progress`` runs.

    A fault test that must cut runs off in flight kills a worker only while it holds some; a
    worker holds each run only for a moment, so it is frozen before the look and cannot finish
    what it holds between the look and the kill. When it holds none it is resumed (False).
    """
    worker.freeze()
    held = await pool.fetchval(
        "SELECT count(*) FROM runs WHERE status = 'in_progress' AND lease_owner = $1", worker.name
    )
    if not held:
        worker.resume()
    return bool(held)
