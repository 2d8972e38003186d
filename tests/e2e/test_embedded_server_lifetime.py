"""The embedded PostgreSQL stops once no live process uses it, even after a command is killed.

Every process that opens the embedded server registers its pid in ``<data dir>/pg/.handle_pids.json``
(pgserver's list) and the last one to leave stops the server. A killed process never leaves:
before, its pid stayed registered forever, so no later process was ever "the last" and the
server ran until the machine rebooted. Now a SIGTERM (or Ctrl-C) leaves properly, and every
process drops the registrations of dead processes when it starts and when it exits, so a
SIGKILL costs at most a server that runs until the next command ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.cli import run_cli, start_cli


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTFLOW_DATABASE_URL"}
    env.update(AGENTFLOW_DATA_DIR=str(data_dir), AGENTFLOW_POLL_INTERVAL="0.2", COLUMNS="200")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return env


def _holders(data_dir: Path) -> list[int]:
    path = data_dir / "pg" / ".handle_pids.json"
    try:
        return list(json.loads(path.read_text()))
    except (FileNotFoundError, ValueError):  # not made yet, or caught mid-write
        return []


def _postmaster(data_dir: Path) -> psutil.Process | None:
    """The running server of ``data_dir``, if any."""
    try:
        pid = int((data_dir / "pg" / "postmaster.pid").read_text().split("\n", 1)[0])
        proc = psutil.Process(pid)
    except (FileNotFoundError, ValueError, psutil.NoSuchProcess):
        return None
    return proc if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE else None


def _until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@pytest.fixture
def data_dir(server_dir: Path) -> Iterator[Path]:
    yield server_dir / "data"
    server = _postmaster(server_dir / "data")
    if server is not None:  # a failed test must not leave its server behind either
        server.terminate()


REGISTER_SECONDS = 240.0
"""A first start makes a new cluster (initdb) and migrates it: seconds when idle, but a CI
machine busy with other lanes has once taken over 120 s."""


def _start_worker(data_dir: Path) -> subprocess.Popen[str]:
    proc = start_cli(["worker"], _env(data_dir))
    deadline = time.monotonic() + REGISTER_SECONDS
    while proc.pid not in _holders(data_dir):
        if time.monotonic() > deadline or proc.poll() is not None:
            state = f"exited {proc.returncode}" if proc.returncode is not None else "still starting"
            proc.kill()
            out, _ = proc.communicate(timeout=10)
            raise AssertionError(f"the worker never registered with the server ({state}):\n{out[-3000:]}")
        time.sleep(0.01)
    return proc


def _assert_stopped(data_dir: Path, output: str) -> None:
    _until(
        lambda: _postmaster(data_dir) is None, 20, f"the server still runs after its last user left\n{output}"
    )
    assert _holders(data_dir) == []
    assert "Traceback" not in output, output


def test_sigterm_during_start_up_still_stops_the_server(data_dir: Path) -> None:
    # Registered with the server but (most likely) still migrating: before the worker's own
    # graceful handler is installed. Before the fix SIGTERM killed it on the spot.
    proc = _start_worker(data_dir)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode in (0, 128 + signal.SIGTERM), out
    _assert_stopped(data_dir, out)


def test_sigterm_of_a_running_worker_stops_the_server(data_dir: Path) -> None:
    proc = _start_worker(data_dir)
    assert proc.stdout is not None
    _until(lambda: "running (" in proc.stdout.readline(), 60, "no worker banner")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    _assert_stopped(data_dir, out)


def test_after_a_sigkill_the_next_command_to_exit_stops_the_server(data_dir: Path) -> None:
    proc = _start_worker(data_dir)
    proc.kill()
    proc.wait(10)
    # Nothing can run in a SIGKILLed process: its server and its registration stay behind.
    server = _postmaster(data_dir)
    assert server is not None and proc.pid in _holders(data_dir)

    listed = run_cli(["workflows", "list"], _env(data_dir))
    assert listed.returncode == 0, listed.stdout + listed.stderr
    _assert_stopped(data_dir, listed.stdout + listed.stderr)


def _slow_first_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """pgserver's first ``pg_ctl start`` returns as if it had waited 10 s in vain (a busy
    machine): the server is started without waiting for it, and the call raises the timeout."""
    import pgserver.postgres_server as pg_module

    real = pg_module.pg_ctl
    calls: list[list[str]] = []

    def slow(args: list[str], **kwargs: object) -> object:
        calls.append(list(args))
        if len(calls) == 1 and "start" in args:
            real(["-W" if a == "-w" else a for a in args], **kwargs)  # type: ignore[operator]
            log = Path(args[args.index("-l") + 1])
            for _ in range(100):  # as after 10 s: the server has begun writing its log
                if log.exists():
                    break
                time.sleep(0.05)
            raise subprocess.TimeoutExpired("pg_ctl", 10)
        return real(args, **kwargs)  # type: ignore[operator]

    monkeypatch.setattr(pg_module, "pg_ctl", slow)


def test_a_start_that_outlasts_pg_ctls_wait_is_waited_for(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentflow.store.embedded import EmbeddedServer

    _slow_first_start(monkeypatch)
    server = EmbeddedServer(data_dir)
    try:
        assert server.running() and "agentflow" in server.url()
    finally:
        server.stop()


def test_without_the_wait_a_slow_start_fails(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: with no time to wait, the same slow start is the error it was."""
    from agentflow.store import embedded

    _slow_first_start(monkeypatch)
    monkeypatch.setattr(embedded, "START_SECONDS", 0.0)
    with pytest.raises(subprocess.TimeoutExpired):
        embedded.EmbeddedServer(data_dir)
