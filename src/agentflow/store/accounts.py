"""Named queries for accounts: upsert with an attribute merge, read, list, and apply the
``account.*`` events of a publication.

An upsert is one statement: a new account is inserted, an existing one keeps the fields the
change does not give, and its attributes are merged (``||``) with the names set to null
removed. Events reach here inside the transaction that stores them, so an account change and
its event commit together.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

import asyncpg

from agentflow.core.accounts import AccountRecord, AccountUpsert, fold_events, is_account_topic
from agentflow.core.events import Event
from agentflow.store.database import Connection

_UPSERT = """
INSERT INTO accounts AS a (workspace_id, id, name, owner, attributes)
VALUES ($1, $2, $3, $4, $5::jsonb)
ON CONFLICT (workspace_id, id) DO UPDATE SET
    name = coalesce($3, a.name),
    owner = coalesce($4, a.owner),
    attributes = (a.attributes || $5::jsonb) - $6::text[],
    updated_at = now()
"""


def _arguments(workspace_id: UUID, change: AccountUpsert) -> tuple[object, ...]:
    return (
        workspace_id,
        change.account_id,
        change.name,
        change.owner,
        change.set_attributes,
        change.removed_attributes,
    )


async def upsert(pool: asyncpg.Pool | Connection, workspace_id: UUID, change: AccountUpsert) -> AccountRecord:
    """Create the account or merge ``change`` into it; return it as stored."""
    row = await pool.fetchrow(_UPSERT + " RETURNING *", *_arguments(workspace_id, change))
    assert row is not None
    return AccountRecord.from_row(row)


async def apply_events(conn: asyncpg.Pool | Connection, workspace_id: UUID, events: Sequence[Event]) -> int:
    """Upsert the accounts of the ``account.*`` events among ``events`` (newly stored ones,
    in log order); return how many accounts changed. No statement when there are none.

    Call it on the connection (and in the transaction) that stored the events.
    """
    if not any(is_account_topic(e.topic) for e in events):
        return 0
    ordered = sorted(events, key=lambda e: (e.xid, e.seq))
    changes = fold_events((e.topic, e.account_id, e.data) for e in ordered)
    if changes:
        # Sorted by account id (fold_events): concurrent batches lock rows in one order.
        await conn.executemany(_UPSERT, [_arguments(workspace_id, c) for c in changes])
    return len(changes)


async def get(pool: asyncpg.Pool, workspace_id: UUID, account_id: str) -> AccountRecord | None:
    """One account."""
    row = await pool.fetchrow(
        "SELECT * FROM accounts WHERE workspace_id = $1 AND id = $2", workspace_id, account_id
    )
    return AccountRecord.from_row(row) if row else None


async def list_accounts(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    *,
    owner: str | None = None,
    limit: int = 100,
    after: str | None = None,
) -> list[AccountRecord]:
    """Accounts by id (pass the last id as ``after`` for the next page), optionally of one owner."""
    rows = await pool.fetch(
        "SELECT * FROM accounts WHERE workspace_id = $1"
        " AND ($2::text IS NULL OR owner = $2) AND ($4::text IS NULL OR id > $4)"
        " ORDER BY id LIMIT $3",
        workspace_id,
        owner,
        limit,
        after,
    )
    return [AccountRecord.from_row(r) for r in rows]
