"""The embedded PostgreSQL server (the ``pgserver`` package) used when no URL is set."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

import psutil

logger = logging.getLogger(__name__)

DATABASE = "agentflow"
HOLDERS_FILE = ".handle_pids.json"
START_SECONDS = 60.0
"""How long a start may take: pgserver's ``pg_ctl start`` gives up after 10 s, which a busy
machine can take while the server goes on starting."""
"""pgserver's list of the pids of the processes using the server, in its data directory."""

# A pid's process must be older than the list's last write to be the one that registered
# (a reused pid belongs to a younger process); process start times are coarse, hence slack.
_START_TIME_SLACK = 1.0


class EmbeddedServer:
    """A PostgreSQL 16 server in ``data_dir/pg``, shared by every process that opens it.

    ``pgserver`` registers each process that opens the server in a list and stops the server
    when the last one closes (or exits normally). A process that is killed never leaves that
    list, and then no later process is ever the last: so every process drops the entries of
    dead processes when it opens and when it closes the server. After a SIGKILL the server
    thus runs until the next process that uses it exits. (The pids are this host's: one data
    directory must not be shared by processes of several hosts or containers.)
    """

    def __init__(self, data_dir: Path) -> None:
        with warnings.catch_warnings():
            # pgserver asks platformdirs for a runtime dir, which warns when XDG_RUNTIME_DIR
            # is unset (containers, CI); its fallback under /tmp is fine.
            warnings.simplefilter("ignore")
            import pgserver  # imported here: only the embedded path needs it
            from pgserver.postgres_server import PostgresServer

        self.pgdata = data_dir / "pg"
        data_dir.mkdir(parents=True, exist_ok=True)
        # pgserver's own inter-process lock guards its list: the same lock makes our edits safe.
        self._lock: Any = PostgresServer._lock
        self._forget_dead_holders()
        logger.info("starting embedded PostgreSQL in %s", self.pgdata)
        self._server: Any = self._start(pgserver.get_server, PostgresServer)  # type: ignore[attr-defined]
        if DATABASE not in self._server.psql("SELECT datname FROM pg_database;"):
            self._server.psql(f"CREATE DATABASE {DATABASE};")

    def _start(self, get_server: Any, server_class: Any) -> Any:
        """The server, started (or found running) within ``START_SECONDS``."""
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                return get_server(self.pgdata, cleanup_mode="stop")
            except (subprocess.TimeoutExpired, AssertionError):
                # pg_ctl stopped waiting (or the server was not ready yet) while the server goes
                # on starting: forget the handle pgserver kept and look again.
                server_class._instances.pop(self.pgdata.resolve(), None)
                if time.monotonic() > deadline:
                    raise
                logger.info("embedded PostgreSQL is still starting; waiting for it")
                time.sleep(1.0)

    def url(self, database: str = DATABASE) -> str:
        """A URL for asyncpg (unix socket in the query string)."""
        return str(self._server.get_uri(database))

    def stop(self) -> None:
        """Release this process's hold; the server stops when no live process holds it."""
        # Without this a holder that was killed would keep the server up: pgserver stops it
        # only when the list holds nothing but the leaving process.
        self._forget_dead_holders()
        self._server.cleanup()

    def running(self) -> bool:
        """Whether the server process runs (after ``stop``: whether another process holds it)."""
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except (FileNotFoundError, ValueError, psutil.NoSuchProcess):
            return False

    def _forget_dead_holders(self) -> None:
        with self._lock:
            forget_dead_holders(self.pgdata)


def forget_dead_holders(pgdata: Path) -> list[int]:
    """Remove the pids of processes that no longer run from pgserver's list in ``pgdata``.

    Call it holding pgserver's lock. Returns the pids kept.
    """
    path = pgdata / HOLDERS_FILE
    try:
        registered = path.stat().st_mtime
        pids = [int(p) for p in json.loads(path.read_text())]
    except (FileNotFoundError, ValueError, TypeError):
        return []
    alive = [pid for pid in pids if _holds(pid, registered)]
    if alive != pids:
        logger.info("embedded PostgreSQL: forgetting exited processes %s", sorted(set(pids) - set(alive)))
        path.write_text(json.dumps(alive))
    return alive


def _holds(pid: int, registered: float) -> bool:
    """Whether ``pid`` is still the live process that registered before ``registered``."""
    if pid == os.getpid():
        return True
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:  # killed, not yet reaped by its parent
            return False
        return proc.create_time() <= registered + _START_TIME_SLACK
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # another user's live process: keep it
        return True
