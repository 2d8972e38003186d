"""Accounts as the engine exposes them: ``engine.accounts``.

What the agent knows about each account (seed 000, "Information about the Account"): a name,
an owner and free-form attributes. People and integrations set it here or through the API;
``account.*`` events (``account.updated`` with ``data: {name, owner, plan, ...}``) update it
in the transaction that stores the event.

Example:
    >>> await engine.accounts.upsert("acme", name="Acme", owner="dana@example.com",
    ...                              attributes={"plan": "enterprise"})     # doctest: +SKIP
    >>> (await engine.accounts.get("acme")).attributes                      # doctest: +SKIP
    {'plan': 'enterprise'}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import UUID

from agentflow.core.accounts import (
    MAX_LIST,
    AccountRecord,
    check_id,
    id_problem,
    owner_problem,
    parse_upsert,
)
from agentflow.core.errors import ConfigError, NotFoundError
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.store import accounts
from agentflow.store.database import Database


class AccountBook:
    """Create, update, read and list accounts."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def upsert(
        self,
        account_id: str,
        *,
        name: str | None = None,
        owner: str | None = None,
        attributes: Mapping[str, Any] | None = None,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> AccountRecord:
        """Create the account, or change it: fields not given are kept, ``attributes`` are
        merged into the stored ones (an attribute set to None is removed).

        Args:
            account_id: the account's id (1-200 characters), as events carry it.
            name: its display name.
            owner: who looks after it: an email address or a person's name.
            attributes: anything else (status, plan, renewal date, ...), a JSON object of at
                most 64 KiB.

        Returns:
            The account as stored after the change.

        Raises:
            ConfigError: ``account_invalid``, listing each offending field; nothing is written.
        """
        change = parse_upsert(account_id, name=name, owner=owner, attributes=attributes)
        return await accounts.upsert(self.db.pool, workspace_id, change)

    async def get(self, account_id: str, *, workspace_id: UUID = DEFAULT_WORKSPACE) -> AccountRecord:
        """An account by id.

        Raises:
            NotFoundError: ``account_not_found`` (also for another workspace's account or an
                id that cannot be one).
        """
        found = None
        if id_problem(account_id) is None:  # an id that cannot be stored names no account
            found = await accounts.get(self.db.pool, workspace_id, account_id)
        if found is None:
            raise NotFoundError("account_not_found", f"no account {account_id[:80]!r} in this workspace")
        return found

    async def list(
        self,
        *,
        owner: str | None = None,
        limit: int = 100,
        after: str | None = None,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> list[AccountRecord]:
        """Accounts by id, one page at a time (pass the last id as ``after``).

        Raises:
            ConfigError: ``account_query_invalid`` (a limit outside 1-500, a bad owner or id).
        """
        errors = []
        if not 1 <= limit <= MAX_LIST:
            errors.append({"path": "limit", "message": f"must be 1 to {MAX_LIST}"})
        problem = owner_problem(owner)
        if problem:
            errors.append({"path": "owner", "message": problem})
        if after is not None:
            try:
                check_id(after)
            except ConfigError as exc:
                errors.append({"path": "after", "message": exc.info.details["errors"][0]["message"]})
        if errors:
            raise ConfigError(
                "account_query_invalid",
                f"the account filters are invalid at {errors[0]['path']}: {errors[0]['message']}",
                details={"errors": errors},
                solution="Correct each listed filter.",
            )
        return await accounts.list_accounts(self.db.pool, workspace_id, owner=owner, limit=limit, after=after)
