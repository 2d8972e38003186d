"""An ``agentflow serve`` process (the API with its worker, dispatcher and scheduler) for fault tests."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from tests.support.pg_cluster import free_port
from tests.support.processes import REPO

_MAIN = "from agentflow.cli import main; main()"
# The CLI's log format: "%(asctime)s %(levelname)s %(name)s: %(message)s".
_LOG_RECORD = re.compile(r"^\S+ \S+ (?P<level>[A-Z]+) (?P<logger>[\w.]+): ")
_RAISED = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Group)\b")


class ServeProcess:
    """``agentflow -v serve`` on 127.0.0.1 and a free port, its output in ``log_dir``.

    Args:
        env: its environment (see ``tests.support.processes.worker_env``).
        log_dir: where ``serve.out`` and ``serve.err`` go.
        concurrency: the worker's runs at once.
        worker: run the worker (and its dispatcher) in the process; False: ``--no-worker``.
        prelude: Python run before the CLI in the process (a negative control's sabotage).
    """

    def __init__(
        self,
        env: Mapping[str, str],
        log_dir: Path,
        *,
        concurrency: int = 16,
        worker: bool = True,
        prelude: str = "",
    ) -> None:
        self.worker = worker
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.out_path = log_dir / "serve.out"
        self.err_path = log_dir / "serve.err"
        main = f"{prelude}\n{_MAIN}" if prelude else _MAIN
        args = [sys.executable, "-c", main, "-v", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        args += ["--concurrency", str(concurrency)] if worker else ["--no-worker"]
        with self.out_path.open("wb") as out, self.err_path.open("wb") as err:
            self.proc = subprocess.Popen(args, cwd=REPO, env=dict(env), stdout=out, stderr=err)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until the worker (if any) printed its banner and ``/healthz`` answers 200."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"serve exited early ({self.proc.returncode}):\n{self.stderr()[-3000:]}")
            if not self.worker or "running (" in self.out_path.read_text(errors="replace"):
                try:
                    with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as response:
                        if response.status == 200:
                            return
                except (urllib.error.URLError, OSError):
                    pass
            time.sleep(0.05)
        raise TimeoutError(f"serve not ready after {timeout}s:\n{self.stderr()[-3000:]}")

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM (graceful), SIGKILL after ``timeout``; return the exit code."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait(10)

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def error_logs(self) -> dict[str, int]:
        """ERROR (and CRITICAL) log records in its output, counted by logger name."""
        found: Counter[str] = Counter()
        for line in self.stderr().splitlines():
            match = _LOG_RECORD.match(line)
            if match and match["level"] in ("ERROR", "CRITICAL"):
                found[match["logger"]] += 1
        return dict(found)

    def error_excerpts(self, limit: int = 5) -> list[str]:
        """The first ERROR records with the last line of each traceback, to say *what* failed."""
        lines = self.stderr().splitlines()
        excerpts: list[str] = []
        for i, line in enumerate(lines):
            match = _LOG_RECORD.match(line)
            if not match or match["level"] not in ("ERROR", "CRITICAL"):
                continue
            tail = next((t for t in lines[i + 1 :] if _LOG_RECORD.match(t)), None)
            block = lines[i + 1 : lines.index(tail, i + 1)] if tail is not None else lines[i + 1 :]
            # The exception's own line, not the DETAIL or HINT lines PostgreSQL adds after it.
            raised = [t for t in block if _RAISED.match(t)] or block[-1:]
            excerpts.append(line + (f" | {raised[-1].strip()}" if raised else ""))
            if len(excerpts) == limit:
                break
        return excerpts
