"""Configuration from the environment (``AGENTFLOW_*``); see docs/reference/configuration.md."""

from __future__ import annotations

from pathlib import Path

import platformdirs
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_data_dir() -> Path:
    return platformdirs.user_data_path("agentflow", appauthor=False)


class Settings(BaseSettings):
    """Every setting, read from ``AGENTFLOW_<NAME>`` environment variables.

    Attributes:
        database_url: a PostgreSQL URL; when unset an embedded server runs in ``data_dir``.
        data_dir: where the embedded server keeps its files.
        pool_min_size / pool_max_size: connections per process.
        statement_timeout: seconds any engine statement may run.
        idle_in_transaction_timeout: seconds a connection may sit idle inside a transaction.
        lease_ttl: seconds a worker's claim on a run lasts without a heartbeat.
        poll_interval: the longest a worker sleeps before looking for due runs again.
        worker_concurrency: runs one worker process executes at once.
        max_rescues: lease expiries a run survives before it fails with ``worker_lost``.
        imports: modules to import at start-up (where your tools live), comma-separated.
        host / port: where ``agentflow serve`` listens.
    """

    model_config = SettingsConfigDict(env_prefix="AGENTFLOW_", extra="ignore")

    database_url: str | None = None
    data_dir: Path = Field(default_factory=_default_data_dir)
    pool_min_size: int = Field(default=2, ge=1)
    pool_max_size: int = Field(default=20, ge=1)
    statement_timeout: float = Field(default=30.0, gt=0)
    idle_in_transaction_timeout: float = Field(default=60.0, gt=0)
    lease_ttl: float = Field(default=30.0, ge=0.3)
    poll_interval: float = Field(default=1.0, gt=0)
    worker_concurrency: int = Field(default=16, ge=1, le=1000)
    max_rescues: int = Field(default=3, ge=0)
    imports: str = ""
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)

    @property
    def import_modules(self) -> list[str]:
        """``imports`` split into module names."""
        return [m.strip() for m in self.imports.split(",") if m.strip()]
