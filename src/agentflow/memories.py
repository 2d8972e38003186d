"""Agent memory as the engine exposes it: ``engine.memory`` (issue 12).

What an agent remembers per key (see ``agentflow.core.agent_memory``): read it page by page
with its summary, or forget a key (a customer asks to be forgotten; a conversation is closed).

Example:
    >>> page = await engine.memory.read("support", "conversation-42")  # doctest: +SKIP
    >>> await engine.memory.forget("support", "conversation-42")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from agentflow.core.errors import NotFoundError
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.store import memory
from agentflow.store.database import Database

MAX_PAGE = 500


class Memories:
    """Read and forget the memory of a workspace's agents."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def read(
        self,
        namespace: str,
        key: str,
        *,
        before: int | None = None,
        limit: int = 50,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> dict[str, Any]:
        """One key's memory: totals, its summary and messages newest first (``limit`` of them,
        older than the message ``before`` when given; a page's ``next_before`` continues).

        Raises:
            NotFoundError: ``memory_not_found`` when nothing is remembered under the key.
        """
        found = await memory.page(
            self.db.pool, workspace_id, namespace, key, before=before, limit=max(1, min(limit, MAX_PAGE))
        )
        if not found["messages_total"] and found["summary"] is None:
            raise NotFoundError(
                "memory_not_found", f"nothing is remembered under {key[:80]!r} in namespace {namespace!r}"
            )
        return found

    async def forget(self, namespace: str, key: str, *, workspace_id: UUID = DEFAULT_WORKSPACE) -> int:
        """Delete everything remembered under ``key``; return how many messages went."""
        return await memory.forget(self.db.pool, workspace_id, namespace, key)
