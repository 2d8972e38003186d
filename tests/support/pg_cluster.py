"""A PostgreSQL server a test owns and can crash: ``pg_ctl -m immediate`` and start again.

The binaries are the ones the ``pgserver`` package ships (the embedded server's), so this
works with nothing but ``pip install -e '.[dev]'``. The cluster lives in a temporary
directory and listens on 127.0.0.1 only, on a port chosen free at creation and kept across
restarts (clients reconnect to the same URL). PostgreSQL refuses to run as root; under root
(containers, CI) the server runs as the ``pgserver`` user, as the embedded server does.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

with warnings.catch_warnings():
    # pgserver asks platformdirs for a runtime dir at import time, which warns without
    # XDG_RUNTIME_DIR (containers, CI); nothing here uses that dir.
    warnings.simplefilter("ignore")
    from pgserver import _commands, utils

BIN = Path(_commands.POSTGRES_BIN_PATH)
_SERVER_USER = "pgserver"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresCluster:
    """One PostgreSQL cluster in a temporary directory: init, start, crash, start, remove.

    Args:
        settings: extra server settings (``-c name=value``), e.g. ``{"fsync": "off"}``.
        prefix: the temporary directory's name prefix.
    """

    def __init__(self, settings: Mapping[str, str] | None = None, *, prefix: str = "agentflow-pg-") -> None:
        self.base = Path(tempfile.mkdtemp(prefix=prefix))
        self.pgdata = self.base / "data"
        self.log = self.base / "server.log"
        self.port = free_port()
        self.settings = dict(settings or {})
        self.restarts = 0
        self._user: str | None = None
        if os.geteuid() == 0:
            utils.ensure_user_exists(_SERVER_USER)
            self._user = _SERVER_USER
            utils.ensure_prefix_permissions(self.base)
            shutil.chown(self.base, _SERVER_USER, _SERVER_USER)
        self._pg("initdb", "-D", str(self.pgdata), "--auth=trust", "-U", "postgres", "--encoding=utf8", "-N")

    def url(self, database: str = "postgres", **params: str) -> str:
        """A URL of ``database`` on this server; ``params`` become query parameters.

        asyncpg passes query parameters it does not know to the server as session settings
        (``synchronous_commit=off``, say).
        """
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}" + (f"?{query}" if query else "")

    def start(self) -> None:
        """Start the server and wait until it accepts connections (crash recovery included)."""
        options = [f"-c port={self.port}", "-c listen_addresses=127.0.0.1", "-c unix_socket_directories="]
        options += [f"-c {name}={value}" for name, value in self.settings.items()]
        self._pg("pg_ctl", "-D", str(self.pgdata), "-l", str(self.log), "-w", "-t", "60",
                 "-o", " ".join(options), "start")  # fmt: skip

    def crash(self) -> None:
        """``pg_ctl -m immediate stop``: every server process quits at once, no checkpoint.

        What is committed survives (the next start replays the WAL); what was only in
        shared memory is gone, as after a crash.
        """
        self._pg("pg_ctl", "-D", str(self.pgdata), "-m", "immediate", "-w", "-t", "60", "stop")
        self.restarts += 1

    def running(self) -> bool:
        """Whether the server's postmaster is up."""
        result = subprocess.run(
            [str(BIN / "pg_ctl"), "-D", str(self.pgdata), "status"], capture_output=True, **self._as_user()
        )
        return result.returncode == 0

    def remove(self) -> None:
        """Stop the server if it runs (fast shutdown) and delete its directory."""
        if self.pgdata.exists() and self.running():
            self._pg("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "-t", "30", "stop")
        shutil.rmtree(self.base, ignore_errors=True)

    def tail_log(self, chars: int = 3000) -> str:
        """The end of the server's log (for failure messages)."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _as_user(self) -> dict[str, Any]:
        return {"user": self._user} if self._user else {}

    def _pg(self, program: str, *args: str) -> None:
        started = time.monotonic()
        result = subprocess.run(
            [str(BIN / program), *args],
            capture_output=True,
            text=True,
            timeout=90,
            cwd=self.base,
            **self._as_user(),
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{program} {' '.join(args)} failed after {time.monotonic() - started:.1f}s"
                f" ({result.returncode}):\n{result.stdout[-1500:]}\n{result.stderr[-1500:]}\n{self.tail_log()}"
            )
