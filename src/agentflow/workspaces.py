"""Workspaces as the engine exposes them: ``engine.workspaces`` (issue 15).

A workspace is a tenant: every row carries its id, every API key belongs to one. Create them,
list them, rename them, say how long each keeps its finished runs; a new workspace comes with
an admin API key (shown once), so whoever created it can act in it.
"""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.access import AccessKeys
from agentflow.core.access_keys import name_is_valid
from agentflow.core.errors import ConfigError, ConflictError, NotFoundError
from agentflow.store import run_retention, workspaces
from agentflow.store.database import Database

MAX_RETENTION_DAYS = 36500


class Workspaces:
    """Create, list and rename workspaces."""

    def __init__(self, db: Database, keys: AccessKeys) -> None:
        self.db = db
        self._keys = keys

    async def create(self, name: str) -> tuple[dict[str, Any], str]:
        """A new workspace and the token of its first admin API key (shown once).

        Raises:
            ConfigError: ``workspace_invalid`` for a bad name.
            ConflictError: ``workspace_name_taken``.
        """
        name = _checked(name)
        created = await workspaces.create(self.db.pool, uuid.uuid4(), name)
        if created is None:
            raise _taken(name)
        _, token = await self._keys.create("api", "first admin key", role="admin", workspace_id=created["id"])
        return created, token

    async def list(self) -> list[dict[str, Any]]:
        """Every workspace, by name."""
        return await workspaces.list_all(self.db.pool)

    async def get(self, workspace_id: UUID) -> dict[str, Any]:
        """One workspace.

        Raises:
            NotFoundError: ``workspace_not_found``.
        """
        found = await workspaces.get(self.db.pool, workspace_id)
        if found is None:
            raise NotFoundError("workspace_not_found", f"no workspace {workspace_id}")
        return found

    async def rename(self, workspace_id: UUID, name: str) -> dict[str, Any]:
        """Give a workspace another name.

        Raises:
            ConfigError: ``workspace_invalid``. ConflictError: ``workspace_name_taken``.
            NotFoundError: ``workspace_not_found``.
        """
        name = _checked(name)
        try:
            found = await workspaces.rename(self.db.pool, workspace_id, name)
        except asyncpg.UniqueViolationError:
            raise _taken(name) from None
        if found is None:
            raise NotFoundError("workspace_not_found", f"no workspace {workspace_id}")
        return found

    async def set_run_retention(self, workspace_id: UUID, days: int | None) -> dict[str, Any]:
        """Keep the workspace's finished runs ``days`` days after they end (0: forever; None:
        as the server's ``AGENTFLOW_RUN_RETENTION_DAYS`` says); workers delete older ones.

        Raises:
            ConfigError: ``retention_invalid`` outside 0-36500. NotFoundError: ``workspace_not_found``.
        """
        if days is not None and not 0 <= days <= MAX_RETENTION_DAYS:
            raise ConfigError(
                "retention_invalid",
                f"a run retention of {days} days is outside 0-{MAX_RETENTION_DAYS}",
                solution="Give the days to keep finished runs (0: forever), or null for the default.",
            )
        found = await workspaces.set_run_retention(self.db.pool, workspace_id, days)
        if found is None:
            raise NotFoundError("workspace_not_found", f"no workspace {workspace_id}")
        return found

    async def prune_runs(self, default_days: int) -> run_retention.Pruned:
        """Delete finished runs past their workspace's retention now (``default_days`` where a
        workspace set none; 0 keeps them), as the workers do once an hour."""
        return await run_retention.prune_runs(self.db.pool, default_days)


def _checked(name: str) -> str:
    name = name.strip()
    if not name_is_valid(name):
        raise ConfigError(
            "workspace_invalid",
            "a workspace's name needs 1 to 100 characters, none of them a control",
            solution="Name it in plain words, e.g. 'acme support'.",
        )
    return name


def _taken(name: str) -> ConflictError:
    return ConflictError(
        "workspace_name_taken", f"a workspace is already named {name!r}", solution="Choose another name."
    )
