"""People: who a request may be for (issue 14). Pure checks of a person's fields, and how a
request's assignees name them: a handle (``lee``), an email address, or a role (``role:finance``:
every person who holds it when the request is made)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from uuid import UUID

from agentflow.core.errors import ConfigError
from agentflow.core.frozen import frozen
from agentflow.core.graph.message_nodes import EMAIL

HANDLE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
ROLE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
ROLE_PREFIX = "role:"
MAX_ROLES = 20


@frozen
class Person:
    """Someone requests can be for."""

    workspace_id: UUID
    handle: str
    name: str | None
    email: str | None
    roles: list[str]
    created_at: datetime
    updated_at: datetime


def role_of(assignee: str) -> str | None:
    """The role an assignee names (``role:finance`` -> ``finance``), else None."""
    return assignee[len(ROLE_PREFIX) :] if assignee.startswith(ROLE_PREFIX) else None


def check_person(handle: str, fields: dict[str, Any]) -> tuple[str | None, str | None, list[str]]:
    """``(name, email, roles)`` of a person's fields, checked.

    Raises:
        ConfigError: ``person_invalid``, naming each field that is wrong.
    """
    problems: list[dict[str, str]] = []
    if not HANDLE.fullmatch(handle):
        problems.append({"path": "handle", "message": "1-64 lowercase letters, digits, '.', '_' or '-'"})
    unknown = sorted(set(fields) - {"name", "email", "roles"})
    problems += [
        {"path": key, "message": "unknown field; a person has name, email and roles"} for key in unknown
    ]
    name, email, roles = fields.get("name"), fields.get("email"), fields.get("roles", [])
    if name is not None and (not isinstance(name, str) or not 1 <= len(name) <= 200):
        problems.append({"path": "name", "message": "a text of 1 to 200 characters"})
    if email is not None and (not isinstance(email, str) or not EMAIL.fullmatch(email)):
        problems.append({"path": "email", "message": "an email address, e.g. lee@example.com"})
    if not isinstance(roles, list) or len(roles) > MAX_ROLES:
        problems.append({"path": "roles", "message": f"a list of at most {MAX_ROLES} roles"})
    else:
        problems += [
            {"path": f"roles[{i}]", "message": "1-64 lowercase letters, digits, '.', '_' or '-'"}
            for i, role in enumerate(roles)
            if not isinstance(role, str) or not ROLE.fullmatch(role)
        ]
    if problems:
        raise ConfigError(
            "person_invalid",
            f"{problems[0]['path']}: {problems[0]['message']}",
            details={"errors": problems},
            solution="Correct each listed field.",
        )
    return name, email, sorted(set(roles))
