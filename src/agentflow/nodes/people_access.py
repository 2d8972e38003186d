"""The people a request is for, as ``user_input`` steps find them: roles expanded to the people
who hold them when the request is made, and where to mail each (see ``agentflow.core.people``).

Failures are :class:`~agentflow.core.errors.StepFailure` codes, not retryable:
``role_has_no_people`` (a request for a role nobody holds would be open to anyone).
"""

from __future__ import annotations

from dataclasses import field
from uuid import UUID

import asyncpg

from agentflow.core.errors import StepFailure
from agentflow.core.frozen import frozen
from agentflow.core.graph.message_nodes import EMAIL
from agentflow.core.people import role_of
from agentflow.store import people


@frozen
class Assigned:
    """Whom a request is for.

    Attributes:
        assignees: handles and addresses, each once, roles replaced by their people.
        mail: for each assignee that can be mailed, the address (a person's, or itself).
        roles: each role named, with the handles it stood for.
    """

    assignees: list[str]
    mail: dict[str, str] = field(default_factory=dict)
    roles: dict[str, list[str]] = field(default_factory=dict)


class PeopleAccess:
    """Look up a workspace's people for the steps of one worker."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def assign(self, workspace_id: UUID, named: list[str], node: str) -> Assigned:
        """Whom ``named`` (handles, addresses, ``role:<name>``) stands for now.

        Raises:
            StepFailure: ``role_has_no_people``.
        """
        roles = [r for r in (role_of(n) for n in named) if r is not None]
        plain = [n for n in named if role_of(n) is None]
        found = await people.reachable(self._pool, workspace_id, plain, roles) if named else []
        by_role = {role: [p.handle for p in found if role in p.roles] for role in roles}
        empty = [role for role, handles in by_role.items() if not handles]
        if empty:
            raise StepFailure(
                "role_has_no_people",
                f"user_input {node!r}: nobody holds the role {empty[0]!r}",
                retryable=False,
                details={"node": node, "roles": empty},
                solution="Give the role to someone (PUT /api/people/{handle}), or name people instead.",
            )
        known = {p.handle: p for p in found}
        assignees: list[str] = []
        for name in named:
            role = role_of(name)
            for who in by_role[role] if role is not None else [name]:
                if who not in assignees:
                    assignees.append(who)
        mail = {}
        for who in assignees:
            person = known.get(who)
            if person is not None and person.email:
                mail[who] = person.email
            elif person is None and EMAIL.fullmatch(who):
                mail[who] = who
        return Assigned(assignees, mail, by_role)
