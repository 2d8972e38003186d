"""Accounts: upsert with an attribute merge, validation, isolation, and account.* events that
update the account in the transaction that stores them."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agentflow.core.errors import ConfigError, NotFoundError
from agentflow.engine import DEFAULT_WORKSPACE, Engine
from agentflow.store import events
from agentflow.store.events import NewEvent


async def other_workspace(engine: Engine) -> uuid.UUID:
    workspace = uuid.uuid4()
    await engine.db.pool.execute(
        "INSERT INTO workspaces (id, name) VALUES ($1, $2)", workspace, str(workspace)
    )
    return workspace


async def test_upsert_creates_then_merges(engine: Engine) -> None:
    made = await engine.accounts.upsert(
        "acme", name="Acme", owner="dana@example.com", attributes={"plan": "pro", "seats": 40}
    )
    assert (made.id, made.name, made.owner, made.attributes) == (
        "acme", "Acme", "dana@example.com", {"plan": "pro", "seats": 40},
    )  # fmt: skip
    changed = await engine.accounts.upsert("acme", attributes={"seats": 55, "plan": None, "stage": "renewal"})
    assert changed.name == "Acme" and changed.owner == "dana@example.com", "fields not given are kept"
    assert changed.attributes == {"seats": 55, "stage": "renewal"}, "merged; a null attribute is removed"
    assert changed.updated_at >= made.updated_at and changed.created_at == made.created_at
    renamed = await engine.accounts.upsert("acme", name="Acme Corp", owner="Dana Scully")
    assert (renamed.name, renamed.owner, renamed.attributes) == (
        "Acme Corp",
        "Dana Scully",
        changed.attributes,
    )
    assert await engine.accounts.get("acme") == renamed
    fresh = await engine.accounts.upsert("bare")
    assert (fresh.name, fresh.owner, fresh.attributes) == (None, None, {})


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"account_id": ""}, "id"),
        ({"account_id": "x" * 201}, "id"),
        ({"account_id": "a\x00b"}, "id"),
        ({"owner": "not an@email"}, "owner"),
        ({"owner": "<script>"}, "owner"),
        ({"owner": ""}, "owner"),
        ({"name": "a\x00"}, "name"),
        ({"attributes": ["plan"]}, "attributes"),
        ({"attributes": {"blob": "x" * 70_000}}, "attributes"),
        ({"attributes": {"nul": "a\x00"}}, "attributes"),
    ],
)
async def test_bad_fields_are_refused_and_write_nothing(
    engine: Engine, fields: dict[str, Any], path: str
) -> None:
    account_id = fields.pop("account_id", "acme")
    with pytest.raises(ConfigError) as caught:
        await engine.accounts.upsert(account_id, **fields)
    assert caught.value.code == "account_invalid"
    assert caught.value.info.details["errors"][0]["path"] == path
    assert await engine.db.pool.fetchval("SELECT count(*) FROM accounts") == 0


async def test_get_list_and_workspace_isolation(engine: Engine) -> None:
    other = await other_workspace(engine)
    for account_id in ("c", "a", "b"):
        await engine.accounts.upsert(account_id, owner="dana@example.com" if account_id != "b" else "ada")
    await engine.accounts.upsert("theirs", workspace_id=other)
    assert [a.id for a in await engine.accounts.list()] == ["a", "b", "c"]
    assert [a.id for a in await engine.accounts.list(limit=2)] == ["a", "b"]
    assert [a.id for a in await engine.accounts.list(after="b")] == ["c"]
    assert [a.id for a in await engine.accounts.list(owner="ada")] == ["b"]
    assert [a.id for a in await engine.accounts.list(workspace_id=other)] == ["theirs"]
    for missing, workspace in (("theirs", DEFAULT_WORKSPACE), ("a", other), ("nope", DEFAULT_WORKSPACE),
                               ("a\x00", DEFAULT_WORKSPACE), ("x" * 300, DEFAULT_WORKSPACE)):  # fmt: skip
        with pytest.raises(NotFoundError) as caught:
            await engine.accounts.get(missing, workspace_id=workspace)
        assert caught.value.code == "account_not_found"
    with pytest.raises(ConfigError) as bad:
        await engine.accounts.list(limit=0)
    assert bad.value.code == "account_query_invalid"


async def test_account_events_update_the_account(engine: Engine) -> None:
    await engine.accounts.upsert("acme", name="Acme", attributes={"plan": "pro", "region": "eu"})
    published = await engine.events.publish([
        {"topic": "account.updated", "message_id": "a-1",
         "data": {"account_id": "acme", "owner": "dana@example.com", "plan": "enterprise", "region": None}},
        {"topic": "account.created", "message_id": "n-1", "account_id": "newco", "data": {"name": "NewCo"}},
        {"topic": "email.received", "message_id": "e-1", "data": {"account_id": "other", "name": "Not an account"}},
    ])  # fmt: skip
    assert [p.created for p in published] == [True, True, True]
    acme = await engine.accounts.get("acme")
    assert (acme.name, acme.owner, acme.attributes) == ("Acme", "dana@example.com", {"plan": "enterprise"})
    assert (await engine.accounts.get("newco")).name == "NewCo"
    with pytest.raises(NotFoundError):
        await engine.accounts.get("other")  # only account.* events update accounts


async def test_events_of_one_batch_apply_in_order_and_a_republish_applies_nothing(engine: Engine) -> None:
    batch = [
        {
            "topic": "account.updated",
            "message_id": "1",
            "data": {"account_id": "acme", "name": "Old", "tier": 1},
        },
        {"topic": "account.updated", "message_id": "2", "data": {"account_id": "acme", "tier": None, "x": 1}},
        {"topic": "account.renamed", "message_id": "3", "data": {"account_id": "acme", "name": "New"}},
    ]
    await engine.events.publish(batch)
    acme = await engine.accounts.get("acme")
    assert (acme.name, acme.attributes) == ("New", {"x": 1})
    await engine.accounts.upsert("acme", name="Set by hand")
    again = await engine.events.publish(batch[:1])
    assert again[0].created is False
    assert (await engine.accounts.get("acme")).name == "Set by hand", (
        "an old event published again changes nothing"
    )


async def test_a_bad_account_event_is_refused_with_nothing_stored(engine: Engine) -> None:
    with pytest.raises(ConfigError) as caught:
        await engine.events.publish([
            {"topic": "email.received", "message_id": "ok", "data": {}},
            {"topic": "account.updated", "message_id": "bad", "data": {"account_id": "acme", "owner": "a@b"}},
        ])  # fmt: skip
    assert caught.value.code == "event_invalid"
    assert caught.value.info.details["errors"][0]["path"] == "events[1].data.owner"
    assert await engine.db.pool.fetchval("SELECT count(*) FROM events") == 0
    assert await engine.db.pool.fetchval("SELECT count(*) FROM accounts") == 0
    # Without an account id, an account event is an ordinary event.
    await engine.events.publish([{"topic": "account.note", "data": {"text": "hello"}}])
    assert await engine.db.pool.fetchval("SELECT count(*) FROM events") == 1
    assert await engine.db.pool.fetchval("SELECT count(*) FROM accounts") == 0


async def test_the_account_change_commits_with_its_event(engine: Engine) -> None:
    new = NewEvent("account.updated", "m-1", {"account_id": "acme", "name": "Acme"}, None, "acme")
    async with engine.db.pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        await events.publish(conn, DEFAULT_WORKSPACE, [new])
        assert await conn.fetchval("SELECT name FROM accounts WHERE id = 'acme'") == "Acme"
        await transaction.rollback()
    assert await engine.db.pool.fetchval("SELECT count(*) FROM accounts") == 0
    # A connection outside a transaction gets one: both rows or neither.
    async with engine.db.pool.acquire() as conn:
        await events.publish(conn, DEFAULT_WORKSPACE, [new])
    assert (await engine.accounts.get("acme")).name == "Acme"


async def test_account_events_stay_in_their_workspace(engine: Engine) -> None:
    other = await other_workspace(engine)
    event = {"topic": "account.updated", "message_id": "m", "data": {"account_id": "acme", "name": "Theirs"}}
    await engine.events.publish([event], workspace_id=other)
    assert (await engine.accounts.get("acme", workspace_id=other)).name == "Theirs"
    with pytest.raises(NotFoundError):
        await engine.accounts.get("acme")
