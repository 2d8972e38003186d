"""Access keys (``engine.keys``): workspace API keys and public trigger keys.

Create a key and show its token once; afterwards only its id, name and dates are visible.
``authenticate`` turns a presented token into its workspace, comparing secrets in constant
time; revoked keys stop working at once.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from agentflow.core.access_keys import KeyKind, generate_key, name_is_valid, parse_key, secret_matches
from agentflow.core.errors import AuthError, ConfigError, NotFoundError
from agentflow.core.frozen import frozen
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.roles import ROLES, Role
from agentflow.store import access
from agentflow.store.database import Database

_KINDS = ("api", "trigger")


@frozen
class KeyHolder:
    """Who presented a key: its workspace, role, id and name."""

    workspace_id: UUID
    role: Role
    key_id: str
    name: str


class AccessKeys:
    """Create, list, revoke and check access keys."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(
        self, kind: KeyKind, name: str, *, role: Role = "admin", workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> tuple[dict[str, Any], str]:
        """A new key; returns its record and its token (shown once, never stored). ``role``
        (API keys): ``admin``, ``operator`` or ``viewer`` (see ``agentflow.core.roles``).

        Raises:
            ConfigError: ``key_invalid`` for an unknown kind or role, or a bad name.
        """
        if kind not in _KINDS:
            raise ConfigError("key_invalid", f"a key's kind is 'api' or 'trigger', not {kind!r}")
        if role not in ROLES:
            raise ConfigError("key_invalid", f"a key's role is one of {', '.join(ROLES)}, not {role!r}")
        name = name.strip()
        if not name_is_valid(name):
            raise ConfigError("key_invalid", "a key's name needs 1 to 100 characters, none of them a control")
        new = generate_key(kind)
        record = await access.insert_key(
            self.db.pool, workspace_id, new.id, kind, name, new.secret_hash, role
        )
        return record, new.token

    async def list(self, *, workspace_id: UUID = DEFAULT_WORKSPACE) -> list[dict[str, Any]]:
        """The workspace's keys, newest first (without secrets)."""
        return await access.list_keys(self.db.pool, workspace_id)

    async def revoke(self, key_id: str, *, workspace_id: UUID = DEFAULT_WORKSPACE) -> dict[str, Any]:
        """Revoke a key of the workspace.

        Raises:
            NotFoundError: ``key_not_found``.
        """
        found = await access.revoke_key(self.db.pool, workspace_id, key_id) if len(key_id) <= 64 else None
        if found is None:
            raise NotFoundError("key_not_found", f"no key {key_id[:64]!r} in this workspace")
        return found

    async def authenticate(self, token: str, kind: KeyKind) -> UUID:
        """The workspace of a presented key.

        Raises:
            AuthError: ``unauthorized`` when the token is not a live key of ``kind``.
        """
        workspace, _ = await self.authenticate_with_role(token, kind)
        return workspace

    async def authenticate_with_role(self, token: str, kind: KeyKind) -> tuple[UUID, Role]:
        """The workspace and role of a presented key (see ``authenticate_holder``)."""
        holder = await self.authenticate_holder(token, kind)
        return holder.workspace_id, holder.role

    async def authenticate_holder(self, token: str, kind: KeyKind) -> KeyHolder:
        """The key a presented token is: its workspace, role, id and name.

        Raises:
            AuthError: ``unauthorized`` when the token is not a live key of ``kind``.
        """
        presented = parse_key(token)
        row = None
        if presented is not None and presented.kind == kind:
            row = await access.find_key(self.db.pool, presented.id, kind)
        if not secret_matches(presented, row["secret_hash"] if row else None) or row is None:
            what = "an API key (afk_...)" if kind == "api" else "a trigger key (aft_...)"
            raise AuthError(
                "unauthorized",
                f"this request needs {what} that is valid and not revoked",
                solution="Create one with 'agentflow keys create'; send API keys as"
                " 'Authorization: Bearer <key>'.",
            )
        if row["stale"]:
            await access.touch_key(self.db.pool, row["id"])
        return KeyHolder(row["workspace_id"], row["role"], row["id"], row["name"])
