"""/api/knowledge through a real server: list, add, search, plan, delete; workspaces; bad input is 4xx."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.api.deps import WORKSPACE_HEADER
from agentflow.engine import Engine
from tests.support.http_server import error_code, serve

KNOWLEDGE = "/api/knowledge"
CHURN = "Get-well plan for an account at risk of churn"
SAVE_DESK = {
    "title": "Save desk",
    "body": "Route cancellation requests to the save desk.\n\n## Steps\n\n"
    "1. Log it in the save desk queue. (owner: Support Engineer; due: within 4 hours)\n"
    "2. Call with a retention offer. (owner: Save Desk Lead; due: within 1 business day)\n",
    "tags": ["save desk", "cancellation request"],
}


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        serve(create_app(engine)) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=30) as http,
    ):
        yield http


async def test_list_add_search_plan_and_delete(client: httpx.AsyncClient) -> None:
    listed = await client.get(KNOWLEDGE)
    assert listed.status_code == 200, listed.text
    bundled = listed.json()["documents"]
    assert len(bundled) >= 8 and {d["source"] for d in bundled} == {"builtin"}
    assert CHURN in {d["title"] for d in bundled} and all(d["chunks"] > 0 for d in bundled)

    added = await client.post(KNOWLEDGE, json=SAVE_DESK)
    assert added.status_code == 201, added.text
    doc = added.json()
    assert (doc["title"], doc["source"], doc["chunks"]) == ("Save desk", "operator", 2)
    assert doc["tags"] == ["save desk", "cancellation request"]
    again = await client.post(KNOWLEDGE, json=SAVE_DESK)
    assert again.json() == doc, "the same content again changes nothing"
    assert len((await client.get(KNOWLEDGE)).json()["documents"]) == len(bundled) + 1

    found = await client.get(f"{KNOWLEDGE}/search", params={"q": "save desk", "limit": 2})
    assert found.status_code == 200, found.text
    passages = found.json()["passages"]
    assert len(passages) == 2 and {p["document_id"] for p in passages} == {doc["id"]}
    assert passages[0]["score"] >= passages[1]["score"] and passages[0]["source"] == "operator"

    planned = await client.get(f"{KNOWLEDGE}/plan", params={"scenario": "get well plan"})
    assert planned.status_code == 200, planned.text
    plan = planned.json()
    assert plan["playbook"]["title"] == CHURN
    assert [s["n"] for s in plan["steps"]] == list(range(1, 9))
    assert plan["steps"][0]["owner"] == "CSM" and plan["steps"][0]["due_in"] == "within 1 business day"
    ids = {d["id"] for d in bundled}
    assert plan["citations"] and all(c["document_id"] in ids and c["heading"] for c in plan["citations"])
    own = (await client.get(f"{KNOWLEDGE}/plan", params={"scenario": "save desk"})).json()
    assert [s["owner"] for s in own["steps"]] == ["Support Engineer", "Save Desk Lead"]

    deleted = await client.delete(f"{KNOWLEDGE}/{doc['id']}")
    assert deleted.status_code == 200 and deleted.json()["id"] == doc["id"]
    assert error_code(await client.delete(f"{KNOWLEDGE}/{doc['id']}"), 404) == "knowledge_not_found"
    assert error_code(await client.delete(f"{KNOWLEDGE}/{bundled[0]['id']}"), 409) == "knowledge_builtin"
    nothing = (await client.get(f"{KNOWLEDGE}/plan", params={"scenario": "zzzz qqqq"})).json()
    assert nothing["playbook"] is None and nothing["steps"] == [] and nothing["citations"] == []


async def test_each_workspace_has_its_own_documents(client: httpx.AsyncClient, engine: Engine) -> None:
    other = uuid.uuid4()
    await engine.db.pool.execute("INSERT INTO workspaces (id, name) VALUES ($1, 'b')", other)
    theirs = {WORKSPACE_HEADER: str(other)}
    added = await client.post(KNOWLEDGE, json=SAVE_DESK, headers=theirs)
    assert added.status_code == 201 and added.json()["workspace_id"] == str(other)
    mine = (await client.get(f"{KNOWLEDGE}/search", params={"q": "save desk", "limit": 50})).json()
    assert all(p["document_id"] != added.json()["id"] for p in mine["passages"])
    assert "Save desk" not in {d["title"] for d in (await client.get(KNOWLEDGE)).json()["documents"]}
    assert error_code(await client.delete(f"{KNOWLEDGE}/{added.json()['id']}"), 404) == "knowledge_not_found"
    found = (await client.get(f"{KNOWLEDGE}/search", params={"q": "save desk"}, headers=theirs)).json()
    assert found["passages"][0]["document_id"] == added.json()["id"]
    unknown = {WORKSPACE_HEADER: str(uuid.uuid4())}
    assert error_code(await client.get(KNOWLEDGE, headers=unknown), 404) == "workspace_not_found"


BAD_REQUESTS: list[tuple[str, str, dict[str, Any], int, str]] = [
    ("POST", "", {"json": {"title": "", "body": "x"}}, 422, "knowledge_invalid"),
    ("POST", "", {"json": {"title": "t", "body": "x" * 200_001}}, 422, "knowledge_invalid"),
    ("POST", "", {"json": {"title": "t", "body": "x", "tags": ["x" * 81]}}, 422, "knowledge_invalid"),
    ("POST", "", {"json": {"title": "t", "body": "---\ntitle: [\n---\nx"}}, 422, "knowledge_invalid"),
    ("POST", "", {"json": {"title": "t", "body": "a\u0000b"}}, 400, "unstorable_text"),
    ("POST", "", {"json": {"title": "t"}}, 422, "invalid_request"),
    ("POST", "", {"json": {"title": 7, "body": "x"}}, 422, "invalid_request"),
    ("POST", "", {"json": {"title": "t", "body": "x", "owner": "me"}}, 422, "invalid_request"),
    ("POST", "", {"json": {"title": "t", "body": "x", "tags": "churn"}}, 422, "invalid_request"),
    ("POST", "", {"json": ["not", "an", "object"]}, 422, "invalid_request"),
    (
        "POST",
        "",
        {"content": b"{oops", "headers": {"content-type": "application/json"}},
        400,
        "invalid_json",
    ),
    ("POST", "", {"json": {"title": "t", "body": "x" * (2 << 20)}}, 413, "body_too_large"),
    ("GET", "/search", {}, 422, "invalid_request"),
    ("GET", "/search", {"params": {"q": ""}}, 422, "knowledge_query_invalid"),
    ("GET", "/search", {"params": {"q": "x" * 1001}}, 422, "knowledge_query_invalid"),
    ("GET", "/search", {"params": {"q": "a\x00b"}}, 400, "unstorable_text"),  # refused at the boundary
    ("GET", "/search", {"params": {"q": "renewal", "limit": 0}}, 422, "invalid_request"),
    ("GET", "/search", {"params": {"q": "renewal", "limit": 51}}, 422, "invalid_request"),
    ("GET", "/plan", {}, 422, "invalid_request"),
    ("GET", "/plan", {"params": {"scenario": " "}}, 422, "knowledge_query_invalid"),
    ("DELETE", "/" + "x" * 10_240, {}, 404, "knowledge_not_found"),
    ("DELETE", "/" + str(uuid.uuid4()), {}, 404, "knowledge_not_found"),
]


async def test_bad_requests_are_4xx_and_store_nothing(client: httpx.AsyncClient, engine: Engine) -> None:
    for method, path, kwargs, status, code in BAD_REQUESTS:
        response = await client.request(method, KNOWLEDGE + path, **kwargs)
        assert error_code(response, status) == code, (method, path[:20], kwargs, response.text[:300])
    assert (
        await engine.db.pool.fetchval("SELECT count(*) FROM knowledge_documents WHERE source = 'operator'")
        == 0
    )
