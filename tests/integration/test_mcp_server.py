"""The MCP endpoint (``agentflow.api.mcp_server``) end to end: the SDK's own client against the
API's app served by uvicorn, a real database and a running worker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal
from uuid import UUID

import httpx
import httpx2
import pytest
from fastapi import FastAPI
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from agentflow.api.app import create_app
from agentflow.api.mcp_server import payload_schema
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.engine import Engine
from tests.support.agents import running_worker
from tests.support.http_server import serve

GREET = {
    "name": "greet",
    "kind": "structured",
    "description": "Say hello.",
    "payload_format": {
        "name": {"type": "string", "description": "Who to greet."},
        "times": {"type": "number", "required": False},
    },
    "nodes": [
        {"id": "m", "type": "mapping", "output": {"hi": "{{ payload.name }}"}},
        {"id": "done", "type": "finish", "output": "{{ input }}"},
    ],
}
APPROVE = {
    "name": "approve me",
    "kind": "structured",
    "nodes": [
        {"id": "ask", "type": "user_input", "message": "OK?"},
        {"id": "yes", "type": "finish", "output": "approved by {{ input.responded_by }}"},
        {"id": "no", "type": "finish", "output": "rejected"},
    ],
    "edges": [
        {"from": "ask", "port": "approved", "to": "yes"},
        {"from": "ask", "port": "rejected", "to": "no"},
    ],
}
BUILTINS = {"start_run", "get_run", "list_workflows", "list_requests", "answer_request"}


def api_app(engine: Engine, auth: Literal["required", "optional"]) -> FastAPI:
    """The API as ``agentflow serve`` builds it: ``create_app`` routes the MCP endpoint at ``/mcp``."""
    return create_app(engine, auth=auth)


@asynccontextmanager
async def mcp_url(engine: Engine, auth: Literal["required", "optional"] = "optional") -> AsyncIterator[str]:
    async with serve(api_app(engine, auth)) as base:
        yield f"{base}/mcp"


@asynccontextmanager
async def connect(url: str, key: str | None = None, mode: str = "auto") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"} if key else None
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, cache=None) as client,
    ):
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed; its structured content."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, text(result)
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def text(result: CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def poll_run(client: Client, run_id: str, timeout: float = 30) -> dict[str, Any]:
    """get_run until the run has ended."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        run = await call(client, "get_run", run_id=run_id)
        if run["status"] in ("completed", "failed", "cancelled"):
            return run
        assert asyncio.get_running_loop().time() < deadline, run
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_tools_are_the_workspace_workflows(engine: Engine, mode: str) -> None:
    await engine.publish_workflow(GREET)
    await engine.publish_workflow({**APPROVE, "name": "sketch"}, draft=True)
    async with mcp_url(engine) as url, connect(url, mode=mode) as client:
        # auto: the 2026-07-28 per-request protocol; legacy: the initialize handshake.
        assert (client.protocol_version == "2026-07-28") == (mode == "auto")
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == BUILTINS | {"run_greet"}
        assert tools["start_run"].input_schema["required"] == ["workflow"]
        schema = tools["run_greet"].input_schema
        assert schema["properties"]["name"] == {"type": "string", "description": "Who to greet."}
        assert schema["properties"]["times"] == {"type": "number"} and schema["required"] == ["name"]
        assert (tools["run_greet"].description or "").startswith("Say hello.")
        listed = await call(client, "list_workflows")
        assert {(w["name"], w["kind"], w["latest_version"], w["draft"]) for w in listed["workflows"]} == {
            ("greet", "structured", 1, False),
            ("sketch", "structured", 1, True),
        }
        # Publishing shows at once: the listing is made per request.
        await engine.publish_workflow(APPROVE)
        assert "run_approve_me" in {t.name for t in (await client.list_tools()).tools}


async def test_a_run_started_through_mcp_completes(engine: Engine) -> None:
    await engine.publish_workflow(GREET)
    async with running_worker(engine), mcp_url(engine) as url, connect(url) as client:
        started = await call(client, "start_run", workflow="greet", payload={"name": "Ada"})
        assert UUID(started["run_id"]) and started["status"] == "created"
        run = await poll_run(client, started["run_id"])
        assert run["status"] == "completed" and run["output"] == {"hi": "Ada"} and run["error"] is None
        by_tool = await call(client, "run_greet", name="Bo")
        assert (await poll_run(client, by_tool["run_id"]))["output"] == {"hi": "Bo"}
    stored = await engine.get_run(started["run_id"])
    assert stored.input == {"name": "Ada"}


async def test_a_request_is_answered_through_mcp(engine: Engine) -> None:
    await engine.publish_workflow(APPROVE)
    async with running_worker(engine), mcp_url(engine) as url, connect(url) as client:
        run_id = (await call(client, "run_approve_me"))["run_id"]
        deadline = asyncio.get_running_loop().time() + 30
        while not (pending := (await call(client, "list_requests"))["requests"]):
            assert asyncio.get_running_loop().time() < deadline, "no request"
            await asyncio.sleep(0.1)
        (request,) = pending
        assert request["run_id"] == run_id and request["message"] == "OK?"
        assert request["kind"] == "approval" and request["node_id"] == "ask" and request["assignees"] == []
        answered = await call(
            client, "answer_request", request_id=request["id"], approved=True, responded_by="ann"
        )
        assert answered["status"] == "approved"
        run = await poll_run(client, run_id)
        assert run["status"] == "completed" and run["output"] == "approved by ann"
        again = await client.call_tool("answer_request", {"request_id": request["id"], "approved": False})
        assert again.is_error and text(again).startswith("request_already_answered: ")
        assert (await call(client, "list_requests"))["requests"] == []
    (stored,) = await engine.requests.list(run_id=UUID(run_id))
    assert stored["responded_via"] == "api"


async def test_engine_errors_are_tool_errors(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    await engine.publish_workflow(GREET)
    async with mcp_url(engine) as url, connect(url) as client:
        unknown = await client.call_tool("start_run", {"workflow": "nope"})
        assert unknown.is_error and text(unknown).startswith("workflow_not_found: no workflow")
        assert unknown.structured_content["error"]["code"] == "workflow_not_found"
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("start_run", {"workflow": "greet", "payload": {"name": 3}}, "payload_invalid"),
            ("run_greet", {}, "payload_invalid"),
            ("get_run", {"run_id": "not-a-run"}, "run_not_found"),
            ("get_run", {"run_id": "00000000-0000-0000-0000-0000000000aa"}, "run_not_found"),
            ("answer_request", {"request_id": "x"}, "request_not_found"),
            ("get_run", {}, "invalid_arguments"),
            ("list_workflows", {"extra": 1}, "invalid_arguments"),
        ]
        for tool, arguments, code in cases:
            result = await client.call_tool(tool, arguments)
            assert result.is_error and text(result).startswith(f"{code}: "), (tool, text(result))
        with pytest.raises(MCPError, match="unknown tool 'run_nope'"):
            await client.call_tool("run_nope", {})

        async def broken(*_args: Any, **_kwargs: Any) -> None:
            raise RuntimeError("secret internals")

        monkeypatch.setattr(engine, "get_run", broken)
        failed = await client.call_tool("get_run", {"run_id": "00000000-0000-0000-0000-0000000000aa"})
        assert (
            failed.is_error and text(failed).startswith("internal_error: ") and "secret" not in text(failed)
        )
        # The server is still there after every error.
        assert len((await client.list_tools()).tools) == len(BUILTINS) + 1


def test_payload_formats_become_json_schemas() -> None:
    fields = {"on": "date", "at": {"type": "datetime", "required": False}, "odd": {"type": "blob"}}
    assert payload_schema({"payload_format": fields}) == {
        "type": "object",
        "properties": {
            "on": {"type": "string", "format": "date"},
            "at": {"type": "string", "format": "date-time"},
        },
        "required": ["on"],
    }
    assert payload_schema({}) == {"type": "object", "properties": {}}


async def test_required_keys_select_the_workspace(engine: Engine) -> None:
    other = UUID("00000000-0000-0000-0000-0000000000b2")
    await engine.db.pool.execute("INSERT INTO workspaces (id, name) VALUES ($1, 'b')", other)
    await engine.publish_workflow(GREET)
    await engine.publish_workflow(APPROVE, workspace_id=other)
    _, default_key = await engine.keys.create("api", "default")
    _, other_key = await engine.keys.create("api", "other", workspace_id=other)
    async with mcp_url(engine, "required") as url:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        async with httpx.AsyncClient() as http:
            for headers in ({}, {"Authorization": "Bearer afk_not_a_key"}, {"Authorization": "Basic eDp5"}):
                refused = await http.post(url, json=body, headers=headers)
                assert refused.status_code == 401, refused.text
                assert refused.json()["error"]["code"] == "unauthorized"
                assert refused.headers["WWW-Authenticate"] == "Bearer"
        async with connect(url, default_key) as client:
            assert "run_greet" in {t.name for t in (await client.list_tools()).tools}
            run_id = (await call(client, "start_run", workflow="greet", payload={"name": "Ada"}))["run_id"]
        async with connect(url, other_key) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == BUILTINS | {"run_approve_me"}
            foreign = await client.call_tool("get_run", {"run_id": run_id})
            assert foreign.is_error and text(foreign).startswith("run_not_found: ")
            started = await call(client, "start_run", workflow="approve me")
    assert (await engine.get_run(started["run_id"], workspace_id=other)).workspace_id == other


async def test_without_required_keys_no_key_is_the_default_workspace(engine: Engine) -> None:
    await engine.publish_workflow(GREET)
    async with mcp_url(engine) as url:
        async with connect(url) as client:
            run_id = (await call(client, "start_run", workflow="greet", payload={"name": "Ada"}))["run_id"]
        # As for every route: a keyless request a proxy relayed is not a local one.
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        async with httpx.AsyncClient() as http:
            proxied = await http.post(url, json=body, headers={"X-Forwarded-For": "203.0.113.9"})
            # Stateless: no GET stream to hold open, no session to DELETE.
            streams = [await http.get(url, headers={"Accept": "text/event-stream"}), await http.delete(url)]
        assert proxied.status_code == 401 and proxied.json()["error"]["code"] == "unauthorized"
        assert [(r.status_code, r.headers["Allow"]) for r in streams] == [(405, "POST")] * 2
    assert (await engine.get_run(run_id)).workspace_id == DEFAULT_WORKSPACE


async def test_a_viewer_reads_through_mcp_and_writes_need_an_operator(engine: Engine) -> None:
    await engine.publish_workflow(GREET)
    started = await engine.start_run("greet", {"name": "Ada"})
    _, viewer = await engine.keys.create("api", "watcher", role="viewer")
    _, operator = await engine.keys.create("api", "oncall", role="operator")
    async with mcp_url(engine, "required") as url:
        async with connect(url, viewer) as client:
            assert "run_greet" in {t.name for t in (await client.list_tools()).tools}
            assert (await call(client, "get_run", run_id=str(started.id)))["status"] == "created"
            assert [w["name"] for w in (await call(client, "list_workflows"))["workflows"]] == ["greet"]
            assert (await call(client, "list_requests"))["requests"] == []
            for tool, arguments in (
                ("start_run", {"workflow": "greet", "payload": {"name": "Bo"}}),
                ("run_greet", {"name": "Bo"}),
                ("answer_request", {"request_id": str(started.id), "approved": True}),
            ):
                refused = await client.call_tool(tool, arguments)
                assert refused.is_error and text(refused).startswith("role_forbidden: "), (
                    tool,
                    text(refused),
                )
                assert refused.structured_content["error"]["details"] == {
                    "role": "viewer",
                    "needed": "operator",
                }
        async with connect(url, operator) as client:
            assert (await call(client, "run_greet", name="Cy"))["status"] == "created"
    assert len(await engine.list_runs(workflow="greet")) == 2, "the viewer started nothing"


async def test_answers_through_mcp_are_in_the_audit_log_with_who_sent_them(engine: Engine) -> None:
    await engine.publish_workflow(APPROVE)
    await engine.start_run("approve me", {})
    _, viewer = await engine.keys.create("api", "watcher", role="viewer")
    operator_key, operator = await engine.keys.create("api", "oncall", role="operator")
    async with running_worker(engine), mcp_url(engine, "required") as url:
        async with connect(url, operator) as client:
            deadline = asyncio.get_running_loop().time() + 30
            while not (pending := (await call(client, "list_requests"))["requests"]):
                assert asyncio.get_running_loop().time() < deadline, "no request"
                await asyncio.sleep(0.1)
            (request,) = pending
        async with connect(url, viewer) as client:
            refused = await client.call_tool(
                "answer_request", {"request_id": request["id"], "approved": True}
            )
            assert refused.is_error
        async with connect(url, operator) as client:
            await call(client, "answer_request", request_id=request["id"], approved=True, responded_by="ann")
            again = await client.call_tool("answer_request", {"request_id": request["id"], "approved": False})
            assert again.is_error and text(again).startswith("request_already_answered: ")
            malformed = await client.call_tool(
                "answer_request", {"request_id": request["id"], "approved": "maybe"}
            )
            assert malformed.is_error and text(malformed).startswith("invalid_arguments: ")
            # Reads and starts are not audited (starts are data plane, recorded on the run).
            await call(client, "list_workflows")
            await call(client, "start_run", workflow="approve me")
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {operator}"}) as http:
            answer = await http.get(url.removesuffix("/mcp") + "/api/audit")
    assert answer.status_code == 200, answer.text
    entries = sorted(answer.json()["entries"], key=lambda e: e["id"])
    assert [(e["action"], e["actor_name"], e["role"], e["status"], e["route"]) for e in entries] == [
        ("request.respond", "watcher", "viewer", 403, "/mcp"),
        ("request.respond", "oncall", "operator", 200, "/mcp"),
        ("request.respond", "oncall", "operator", 409, "/mcp"),
        ("request.respond", "oncall", "operator", 422, "/mcp"),
    ]
    assert {e["actor"] for e in entries[1:]} == {f"key:{operator_key['id']}"}
    assert {e["target"]["request_id"] for e in entries} == {request["id"]}
