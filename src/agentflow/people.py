"""People as the engine exposes them: ``engine.people`` (issue 14).

Who requests can be for: a handle, a name, an email address and roles. A ``user_input`` node's
``assignees`` may name a role (``role:finance``): the request is then for everyone who holds it
when the request is made, and the email channel mails each of them.

Example:
    >>> await engine.people.set("lee", {"email": "lee@example.com", "roles": ["finance"]})  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from agentflow.core.errors import NotFoundError
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.people import Person, check_person
from agentflow.store import people, references
from agentflow.store.database import Database


class Directory:
    """Set, read, list and remove the people of a workspace."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def set(
        self, handle: str, fields: dict[str, Any], *, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> Person:
        """Create or replace the person ``handle`` with ``fields``: ``name``, ``email``, ``roles``.

        Raises:
            ConfigError: ``person_invalid`` naming each wrong field.
        """
        name, email, roles = check_person(handle, fields)
        return await people.upsert(self.db.pool, workspace_id, handle, name, email, roles)

    async def get(self, handle: str, *, workspace_id: UUID = DEFAULT_WORKSPACE) -> Person:
        """One person.

        Raises:
            NotFoundError: ``person_not_found``.
        """
        found = await people.get(self.db.pool, workspace_id, handle)
        if found is None:
            raise NotFoundError("person_not_found", f"no person {handle[:80]!r} in this workspace")
        return found

    async def list(self, *, role: str | None = None, workspace_id: UUID = DEFAULT_WORKSPACE) -> list[Person]:
        """Everyone (who holds ``role``, when given), by handle."""
        return await people.list_people(self.db.pool, workspace_id, role)

    async def delete(
        self, handle: str, *, force: bool = False, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> None:
        """Remove a person (their past answers stay as they were).

        Args:
            force: remove them even though published workflows name them as an assignee.

        Raises:
            NotFoundError: ``person_not_found``.
            ConflictError: ``resource_in_use`` (the workflows that name them are listed).
        """
        if await people.get(self.db.pool, workspace_id, handle) is not None:
            await references.refuse_if_used(
                self.db.pool,
                workspace_id,
                [f"person:{handle}"],
                doing=f"remove person {handle!r}",
                force=force,
            )
        if not await people.delete(self.db.pool, workspace_id, handle):
            raise NotFoundError("person_not_found", f"no person {handle[:80]!r} in this workspace")
