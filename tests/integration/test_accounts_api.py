"""/api/accounts through a real server, and `agentflow accounts` as a process."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.api.deps import WORKSPACE_HEADER
from agentflow.engine import Engine
from tests.support.cli import cli_env, invoke_cli
from tests.support.http_server import error_code, serve

ACCOUNTS = "/api/accounts"


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        serve(create_app(engine)) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=30) as http,
    ):
        yield http


async def test_put_get_and_list(client: httpx.AsyncClient) -> None:
    made = await client.put(f"{ACCOUNTS}/acme", json={"name": "Acme", "owner": "dana@example.com",
                                                       "attributes": {"plan": "pro", "seats": 40}})  # fmt: skip
    assert made.status_code == 200, made.text
    assert made.json()["attributes"] == {"plan": "pro", "seats": 40} and made.json()["id"] == "acme"
    merged = await client.put(f"{ACCOUNTS}/acme", json={"attributes": {"seats": None, "stage": "renewal"}})
    assert merged.json()["name"] == "Acme" and merged.json()["attributes"] == {
        "plan": "pro",
        "stage": "renewal",
    }
    got = await client.get(f"{ACCOUNTS}/acme")
    assert got.status_code == 200 and got.json() == merged.json()
    await client.put(f"{ACCOUNTS}/beta", json={"owner": "Ada Lovelace"})
    await client.put(f"{ACCOUNTS}/gamma", json={})
    page = (await client.get(ACCOUNTS, params={"limit": 2})).json()
    assert [a["id"] for a in page["accounts"]] == ["acme", "beta"] and page["next_after"] == "beta"
    rest = (await client.get(ACCOUNTS, params={"after": "beta"})).json()
    assert [a["id"] for a in rest["accounts"]] == ["gamma"] and rest["next_after"] is None
    owned = (await client.get(ACCOUNTS, params={"owner": "Ada Lovelace"})).json()
    assert [a["id"] for a in owned["accounts"]] == ["beta"]
    # The events route of an account still answers beside the new ones.
    assert (await client.get(f"{ACCOUNTS}/acme/events")).status_code == 200


async def test_an_account_event_shows_in_the_api(client: httpx.AsyncClient) -> None:
    published = await client.post("/api/events", json={"events": [
        {"topic": "account.updated", "message_id": "m-1", "data": {"account_id": "acme", "owner": "Dana", "arr": 1200}}
    ]})  # fmt: skip
    assert published.status_code < 300, published.text
    body = (await client.get(f"{ACCOUNTS}/acme")).json()
    assert (body["owner"], body["attributes"]) == ("Dana", {"arr": 1200})
    refused = await client.post("/api/events", json={"events": [
        {"topic": "account.updated", "data": {"account_id": "acme", "owner": "dana@"}}
    ]})  # fmt: skip
    assert error_code(refused, 422) == "event_invalid"
    assert refused.json()["error"]["details"]["errors"][0]["path"] == "events[0].data.owner"


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"owner": "not an@email"}, "owner"),
        ({"owner": 7}, "owner"),
        ({"name": ""}, "name"),
        ({"attributes": [1]}, "attributes"),
        ({"attributes": {"big": "x" * 70_000}}, "attributes"),
        ({"colour": "red"}, "colour"),
    ],
)
async def test_bad_fields_are_422(client: httpx.AsyncClient, body: dict[str, Any], path: str) -> None:
    response = await client.put(f"{ACCOUNTS}/acme", json=body)
    assert error_code(response, 422) == "account_invalid"
    assert response.json()["error"]["details"]["errors"][0]["path"] == path
    assert error_code(await client.get(f"{ACCOUNTS}/acme"), 404) == "account_not_found"


async def test_bad_ids_filters_and_bodies(client: httpx.AsyncClient) -> None:
    assert error_code(await client.put(f"{ACCOUNTS}/{'x' * 201}", json={}), 422) == "account_invalid"
    # NUL is refused at the boundary for every path and query (test_bad_input.py).
    assert error_code(await client.put(f"{ACCOUNTS}/a%00b", json={}), 400) == "unstorable_text"
    assert (await client.put(f"{ACCOUNTS}/acme", json=["name"])).status_code == 422
    for params in ({"limit": 0}, {"limit": 501}, {"after": ""}, {"owner": "x" * 321}):
        assert error_code(await client.get(ACCOUNTS, params=params), 422) == "invalid_request", params
    assert error_code(await client.get(ACCOUNTS, params={"owner": "a@b"}), 422) == "account_query_invalid"
    for ref in ("nope", "x" * 300):
        assert error_code(await client.get(f"{ACCOUNTS}/{ref}"), 404) == "account_not_found"


async def test_another_workspaces_account_is_404(client: httpx.AsyncClient, engine: Engine) -> None:
    other = uuid.uuid4()
    await engine.db.pool.execute("INSERT INTO workspaces (id, name) VALUES ($1, 'b')", other)
    await engine.accounts.upsert("theirs", name="Theirs", workspace_id=other)
    await engine.accounts.upsert("mine", name="Mine")
    foreign = {WORKSPACE_HEADER: str(other)}
    assert error_code(await client.get(f"{ACCOUNTS}/theirs"), 404) == "account_not_found"
    assert error_code(await client.get(f"{ACCOUNTS}/mine", headers=foreign), 404) == "account_not_found"
    assert [a["id"] for a in (await client.get(ACCOUNTS, headers=foreign)).json()["accounts"]] == ["theirs"]
    await client.put(f"{ACCOUNTS}/mine", json={"name": "Not yours"}, headers=foreign)
    assert (await engine.accounts.get("mine")).name == "Mine", "a PUT in another workspace is its own account"


async def test_cli_sets_shows_and_lists(engine: Engine, database_url: str) -> None:
    env = cli_env(database_url)
    made = invoke_cli(["accounts", "set", "acme", "--name", "Acme", "--owner", "dana@example.com",
                    "--attr", "plan=enterprise", "--attr", "seats=40", "--attr", 'tags=["a","b"]'], env)  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    assert (await engine.accounts.get("acme")).attributes == {
        "plan": "enterprise",
        "seats": 40,
        "tags": ["a", "b"],
    }
    dropped = invoke_cli(["accounts", "set", "acme", "--attr", "seats=null"], env)
    assert dropped.returncode == 0 and "seats" not in (await engine.accounts.get("acme")).attributes
    shown = invoke_cli(["accounts", "show", "acme"], env)
    assert shown.returncode == 0 and "Acme" in shown.stdout and "dana@example.com" in shown.stdout
    assert 'plan: "enterprise"' in shown.stdout
    listed = invoke_cli(["accounts", "list"], env)
    assert listed.returncode == 0 and "acme" in listed.stdout
    bad = invoke_cli(["accounts", "set", "acme", "--owner", "dana@"], env)
    assert bad.returncode == 1 and "account_invalid" in bad.stderr and "Traceback" not in bad.stderr
    malformed = invoke_cli(["accounts", "set", "acme", "--attr", "noequals"], env)
    assert malformed.returncode == 2 and "invalid_attribute" in malformed.stderr
    missing = invoke_cli(["accounts", "show", "nope"], env)
    assert missing.returncode == 1 and "account_not_found" in missing.stderr
