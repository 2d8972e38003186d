"""The embedded PostgreSQL server (the ``pgserver`` package) used when no URL is set."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

DATABASE = "agentflow"


class EmbeddedServer:
    """A PostgreSQL 16 server in ``data_dir/pg``, shared by every process that opens it.

    ``pgserver`` counts the processes holding the server and stops it when the last one
    closes (or exits), so a CLI command, a worker and ``serve`` can share one data dir.
    """

    def __init__(self, data_dir: Path) -> None:
        with warnings.catch_warnings():
            # pgserver asks platformdirs for a runtime dir, which warns when XDG_RUNTIME_DIR
            # is unset (containers, CI); its fallback under /tmp is fine.
            warnings.simplefilter("ignore")
            import pgserver  # imported here: only the embedded path needs it

        self.pgdata = data_dir / "pg"
        data_dir.mkdir(parents=True, exist_ok=True)
        logger.info("starting embedded PostgreSQL in %s", self.pgdata)
        get_server: Any = pgserver.get_server  # type: ignore[attr-defined]
        self._server: Any = get_server(self.pgdata, cleanup_mode="stop")
        if DATABASE not in self._server.psql("SELECT datname FROM pg_database;"):
            self._server.psql(f"CREATE DATABASE {DATABASE};")

    def url(self, database: str = DATABASE) -> str:
        """A URL for asyncpg (unix socket in the query string)."""
        return str(self._server.get_uri(database))

    def stop(self) -> None:
        """Release this process's hold; the server stops when no process holds it."""
        self._server.cleanup()
