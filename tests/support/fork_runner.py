"""Start ``agentflow`` commands and Python scripts as real processes, without paying the CLI's
import time (about 1.5 s) for each.

A server process imports ``agentflow.cli`` once; each command is then a child forked from it:
a separate process with its own working directory, environment and output file, running the
same ``main()`` the console script runs, with the console script's import path (its bin
directory first, not the working directory). The server has no threads, so forking is safe.

The test process talks to the server through ``ForkRunner`` (JSON lines over a pipe).
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BIN = str(Path(sys.executable).parent)


class ForkRunner:
    """The test side: start commands, wait for them; ``close()`` when done."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from tests.support.fork_runner import serve; serve()"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.started: set[int] = set()

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server died ({self._proc.poll()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def start(self, *, cwd: Path, env: dict[str, str], output: Path, argv: list[str] | None = None,
              script: Path | None = None) -> int:  # fmt: skip
        """Start ``agentflow ARGV`` or ``python SCRIPT``; return its pid (output goes to ``output``)."""
        assert (argv is None) != (script is None)
        request = {"op": "start", "cwd": str(cwd), "env": env, "output": str(output), "argv": argv,
                   "script": str(script) if script else None}  # fmt: skip
        pid = int(self._ask(request)["pid"])
        self.started.add(pid)
        return pid

    def wait(self, pid: int, timeout: float) -> int | None:
        """The exit code of ``pid`` once it ends, or None if it still runs after ``timeout`` s."""
        code = self._ask({"op": "wait", "pid": pid, "timeout": timeout})["code"]
        if code is not None:
            self.started.discard(pid)
        return None if code is None else int(code)

    def run(self, timeout: float = 120, **kwargs: Any) -> int:
        """Start a command and wait for it; kill it (and fail) if it takes longer than ``timeout``."""
        pid = self.start(**kwargs)
        code = self.wait(pid, timeout)
        if code is None:
            os.kill(pid, signal.SIGKILL)
            self.wait(pid, 10)
            raise TimeoutError(f"{kwargs.get('argv') or kwargs.get('script')} ran longer than {timeout} s")
        return code

    def close(self) -> None:
        """Kill what still runs, stop the server."""
        for pid in list(self.started):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self.wait(pid, 10)
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(10)


def serve() -> None:
    """The server side: read requests from stdin, answer on stdout."""
    import agentflow.cli  # noqa: F401  (the import every child shares)

    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "start":
            sys.stdout.flush()
            answer: dict[str, Any] = {"pid": _fork(request)}
        else:
            answer = {"code": _wait(request["pid"], request["timeout"])}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


def _wait(pid: int, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped before: its code is gone
            return 255
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


def _fork(request: dict[str, Any]) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        out = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        code = _main(request)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _main(request: dict[str, Any]) -> int:
    # python -c put "" (the server's directory) first; a console script has its bin directory.
    sys.path[:] = [p for p in sys.path if p not in ("", str(ROOT))]
    if request["script"]:
        script = request["script"]
        sys.argv = [script]
        sys.path.insert(0, str(Path(script).parent))  # what ``python script.py`` does
        runpy.run_path(script, run_name="__main__")
        return 0
    from agentflow.cli import main

    sys.argv = ["agentflow", *request["argv"]]
    sys.path.insert(0, BIN)
    main()
    return 0
