"""MCP tools end to end: a real MCP server (the SDK's own, ``tests/support/mcp_server.py``) run
over stdio as a subprocess or served over streamable HTTP by the test, the real worker and
database, and a scripted model. Agents are offered the server's tools as ``<server>__<tool>``
and each call is its own step; ``mcp_tool`` nodes call one tool; failures carry stable codes.
"""

from __future__ import annotations

import base64
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentflow.agent.mcp_tools import listing_key
from agentflow.core.chat import ModelRequest
from agentflow.core.definitions import AgentConfig
from agentflow.core.errors import StepFailure
from agentflow.core.mcp import McpServer
from agentflow.core.records import RunRecord, StepRecord
from agentflow.engine import Engine
from agentflow.integrations.mcp_client import McpConnector
from tests.conftest import make_settings
from tests.support.agents import calls, replies, running_worker, until
from tests.support.http_server import serve
from tests.support.mcp_server import COMMAND, serve_http
from tests.support.oauth2_server import OAuth2Server

SRV = {"name": "srv", "command": COMMAND, "timeout": "20s"}
ONCE = {"max_attempts": 1}
TWICE = {"max_attempts": 2, "initial_delay": "100ms", "jitter": 0}


SECRET_KEY = base64.b64encode(os.urandom(32)).decode()


@pytest.fixture
async def loopback(database_url: str) -> AsyncIterator[Engine]:
    """An engine whose guarded HTTP client may reach 127.0.0.1 (the test's MCP server)."""
    eng = await Engine.connect(make_settings(database_url, http_allow="127.0.0.1"), migrate_schema=False)
    yield eng
    await eng.close()


def agent(name: str, servers: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "agent", "prompt": "Add the numbers.", "mcp_servers": servers, **extra}


def graph(name: str, *nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "mcp_servers": [SRV], "nodes": list(nodes), **extra}


def mcp_tool(tool: str, args: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": "call", "type": "mcp_tool", "server": "srv", "tool": tool, "args": args or {}, **extra}


async def run_to_end(engine: Engine, config: dict[str, Any], payload: Any = None, **worker: Any) -> RunRecord:
    await engine.publish_workflow(config)
    async with running_worker(engine, **worker):
        run = await engine.start_run(config["name"], payload)
        return await until(engine, run.id, lambda r: r.status.is_terminal, timeout=45)


async def steps_of(engine: Engine, run: RunRecord, kind: str) -> list[StepRecord]:
    return [s for s in await engine.list_steps(run.id) if s.kind == kind]


async def test_an_agent_is_offered_a_stdio_servers_tools_and_its_call_is_a_recorded_step(
    engine: Engine,
) -> None:
    model = replies(
        calls(("srv__add", {"a": 2, "b": 3})),
        calls(("complete", {"summary": "2 + 3 = 5"})),
    )
    await engine.publish_workflow(agent("adder", [SRV]))
    async with running_worker(engine, model=model) as worker:
        run = await engine.start_run("adder", {"a": 2, "b": 3})
        done = await until(engine, run.id, lambda r: r.status.is_terminal, timeout=45)
        config = AgentConfig.model_validate(agent("adder", [SRV]))
        (server,) = config.mcp_servers or []
        assert worker.agents.mcp.cached(listing_key(done, server)), (
            "the listing is kept for the next decision"
        )
    assert done.status == "completed", done.error
    first: ModelRequest = model.requests[0]
    offered = {tool.name: tool for tool in first.tools}
    assert {"srv__echo", "srv__add", "srv__fail", "srv__crash", "srv__slow"} <= set(offered)
    add = offered["srv__add"]
    assert add.parameters["properties"].keys() == {"a", "b"} and add.parameters["required"] == ["a", "b"]
    assert "Add two integers." in add.description
    assert "srv__add" in first.messages[0].content, "the tool list the model reads names it too"
    (tool_step, _complete) = await steps_of(engine, done, "agent.tool")
    assert (tool_step.name, tool_step.status) == ("srv__add", "completed")
    assert tool_step.input == {"call_id": "c0", "arguments": {"a": 2, "b": 3}}
    assert tool_step.output["result"] == {
        "text": "5",
        "content": [{"type": "text", "text": "5"}],
        "structured": {"result": 5},
    }


async def test_an_agent_calls_an_http_server_and_approvals_by_the_offered_name_hold_the_call(
    loopback: Engine,
) -> None:
    model = replies(calls(("web__echo", {"text": "hello"})), calls(("complete", {"summary": "echoed"})))
    async with serve_http() as url:
        web = {"name": "web", "url": url, "headers": {"X-Team": "ops"}, "tools": ["echo"]}
        await loopback.publish_workflow(agent("echoer", [web], approvals=["web__echo"]))
        async with running_worker(loopback, model=model):
            run = await loopback.start_run("echoer", {})
            waiting = await until(loopback, run.id, lambda r: r.status == "waiting")
            assert waiting.status_reason == "awaiting_approval"
            (request,) = await loopback.governance.approvals()
            assert (request["tool"], request["arguments"]) == ("web__echo", {"text": "hello"})
            await loopback.governance.decide(request["id"], approve=True, decided_by="lee")
            done = await until(loopback, run.id, lambda r: r.status.is_terminal, timeout=30)
    assert done.status == "completed", done.error
    assert {t.name for t in model.requests[0].tools if "__" in t.name} == {"web__echo"}, "tools: only echo"
    echo = next(s for s in await steps_of(loopback, done, "agent.tool") if s.name == "web__echo")
    assert echo.output["result"]["text"] == "hello"


async def test_an_agent_node_in_a_graph_calls_the_tools_of_its_own_servers(loopback: Engine) -> None:
    model = replies(calls(("web__add", {"a": 20, "b": 22})), calls(("complete", {"summary": "it is 42"})))
    async with serve_http() as url:
        helper = {"id": "helper", "type": "agent", "prompt": "Add 20 and 22.",
                  "mcp_servers": [{"name": "web", "url": url}]}  # fmt: skip
        done_node = {"id": "done", "type": "finish", "output": "{{ input.summary }}"}
        config = {"name": "with-mcp-agent", "kind": "structured", "nodes": [helper, done_node]}
        done = await run_to_end(loopback, config, {}, model=model)
    assert done.status == "completed", done.error
    assert done.output == "it is 42"
    row = await loopback.db.pool.fetchrow("SELECT id FROM runs WHERE parent_run_id = $1", done.id)
    child = await loopback.get_run(row["id"])
    add = next(s for s in await steps_of(loopback, child, "agent.tool") if s.name == "web__add")
    assert add.output["result"]["structured"] == {"result": 42}


async def test_an_agents_bad_arguments_and_failing_tool_are_results_the_model_sees(engine: Engine) -> None:
    model = replies(
        calls(("srv__add", {"a": "two"})),
        calls(("srv__fail", {"reason": "disk full"})),
        calls(("complete", {"summary": "gave up"})),
    )
    done = await run_to_end(engine, agent("careless", [SRV]), model=model)
    assert done.status == "completed", done.error
    bad, failed, _complete = await steps_of(engine, done, "agent.tool")
    assert bad.output["refused"] and bad.output["result"]["error"]["code"] == "invalid_tool_args"
    assert bad.output["result"]["error"]["message"] == (
        "arguments for 'srv__add' are invalid: (arguments): 'b' is a required property; "
        "a: 'two' is not of type 'integer'"
    ), "checked against the server's schema before anything was called"
    assert failed.output["refused"] and failed.output["result"]["error"]["code"] == "mcp_tool_error"
    assert "cannot do that: disk full" in failed.output["result"]["error"]["message"]


async def test_an_agent_whose_server_cannot_start_fails_its_decision_with_what_to_fix(engine: Engine) -> None:
    gone = {"name": "gone", "command": ["agentflow-no-such-mcp-server", "--stdio"]}
    done = await run_to_end(engine, agent("stranded", [gone], retry=ONCE), model=replies())
    assert done.status == "failed"
    assert done.error["code"] == "mcp_unavailable"
    assert "'agentflow-no-such-mcp-server'" in done.error["message"]
    assert "Install 'agentflow-no-such-mcp-server' on every worker" in done.error["solution"]
    (decide,) = await steps_of(engine, done, "agent.decide")
    assert decide.error["details"]["phase"] == "start"


async def test_an_mcp_tool_node_calls_the_tool_with_templated_args_and_sends_its_answer_on(
    engine: Engine,
) -> None:
    finish = {"id": "done", "type": "finish", "output": "{{ input.structured.result }} / {{ input.text }}"}
    config = graph("adds", mcp_tool("add", {"a": "{{ payload.a }}", "b": 40}), finish)
    done = await run_to_end(engine, config, {"a": 2})
    assert done.status == "completed", done.error
    assert done.output == "42 / 42"
    (step,) = await steps_of(engine, done, "mcp_tool")
    assert (step.name, step.input) == (
        "srv/add",
        {"server": "srv", "tool": "add", "arguments": {"a": 2, "b": 40}},
    )


async def test_an_mcp_tool_node_reaches_an_allowed_http_server_through_the_workers_client(
    loopback: Engine,
) -> None:
    async with serve_http() as url:
        web = {"name": "srv", "url": url, "tools": ["add"]}
        config = {**graph("adds-over-http", mcp_tool("add", {"a": 1, "b": 2}),
                          {"id": "done", "type": "finish", "output": "{{ input.text }}"}), "mcp_servers": [web]}  # fmt: skip
        done = await run_to_end(loopback, config)
    assert done.status == "completed", done.error
    assert done.output == "3"


async def test_a_tool_error_goes_down_the_error_port_with_the_tools_text(engine: Engine) -> None:
    handled = {"id": "handled", "type": "finish", "output": "{{ input.code }}: {{ input.details.text }}"}
    config = graph(
        "fails",
        mcp_tool("fail", {"reason": "{{ payload.why }}"}),
        {"id": "ok", "type": "finish", "output": "no"},
        handled,
        edges=[{"from": "call", "to": "ok"}, {"from": "call", "port": "error", "to": "handled"}],
    )
    done = await run_to_end(engine, config, {"why": "quota"})
    assert done.status == "completed", done.error
    assert done.output == "mcp_tool_error: Error executing tool fail: cannot do that: quota"
    (step,) = await steps_of(engine, done, "mcp_tool")
    assert step.error["code"] == "mcp_tool_error" and step.attempt == 1, "a tool's error is not retried"


async def test_a_server_that_crashes_mid_call_is_retried_then_fails_the_run_with_the_code(
    engine: Engine,
) -> None:
    done = await run_to_end(engine, graph("crashes", mcp_tool("crash", retry=TWICE)))
    assert done.status == "failed"
    assert done.error["code"] == "mcp_connection_lost"
    assert "closed the connection during the call to 'crash'" in done.error["message"]
    assert done.error["details"]["stderr"].endswith("crashing on purpose"), "the server's last words"
    attempts = await steps_of(engine, done, "mcp_tool")
    assert [s.attempt for s in attempts] == [1, 2]
    assert all(s.error["code"] == "mcp_connection_lost" for s in attempts)


async def test_a_node_whose_server_does_not_exist_fails_with_mcp_unavailable(engine: Engine) -> None:
    config = graph("missing", mcp_tool("add", {"a": 1, "b": 2}, retry=ONCE))
    config["mcp_servers"] = [{"name": "srv", "command": ["/nonexistent/mcp-server"]}]
    done = await run_to_end(engine, config)
    assert done.status == "failed"
    assert done.error["code"] == "mcp_unavailable"
    assert done.error["message"].startswith(
        "node 'call': MCP server 'srv' (command '/nonexistent/mcp-server')"
    )
    assert "give its full path" in done.error["solution"]
    assert done.error["details"]["node"] == "call"


async def test_a_server_that_does_not_answer_in_time_is_unavailable(engine: Engine) -> None:
    config = graph("sleepy", mcp_tool("slow", {"seconds": 30}, retry=ONCE))
    config["mcp_servers"] = [{**SRV, "timeout": "4s"}]
    done = await run_to_end(engine, config)
    assert done.status == "failed"
    assert done.error["code"] == "mcp_unavailable"
    assert "did not answer the call to 'slow' within 4s" in done.error["message"]


async def test_an_http_server_on_a_private_address_is_refused_unless_allowed(engine: Engine) -> None:
    async with serve_http() as url:
        config = graph("private", mcp_tool("echo", {"text": "hi"}, retry=ONCE))
        config["mcp_servers"] = [{"name": "srv", "url": url}]
        done = await run_to_end(engine, config)
    assert done.status == "failed"
    assert done.error["code"] == "destination_blocked", done.error


@asynccontextmanager
async def answering(status: int) -> AsyncIterator[str]:
    """An HTTP server that answers every request with ``status`` (no MCP at all)."""

    async def reply(request: Request) -> JSONResponse:
        return JSONResponse({"error": "no"}, status_code=status)

    app = Starlette(routes=[Route("/mcp", reply, methods=["GET", "POST", "DELETE"])])
    async with serve(app) as base:
        yield f"{base}/mcp"


@pytest.mark.parametrize(
    ("status", "code", "retryable", "words"),
    [
        (401, "mcp_protocol_error", False, "Authorization"),
        (503, "mcp_unavailable", True, "retried"),
    ],
)
async def test_an_http_error_status_says_whether_to_retry_and_what_to_fix(
    status: int, code: str, retryable: bool, words: str
) -> None:
    async with answering(status) as url:
        server = McpServer(name="web", url=url, headers={"Authorization": "Bearer wrong"})
        with pytest.raises(StepFailure) as info:
            await McpConnector(allow=["127.0.0.1"]).call(server, "echo", {"text": "hi"})
    failure = info.value
    assert (failure.info.code, failure.retryable) == (code, retryable)
    assert failure.info.details["http_status"] == status and words in (failure.info.solution or "")
    assert "Bearer" not in failure.info.message + str(failure.info.details), "headers stay out of errors"


async def test_a_command_that_is_not_an_mcp_server_is_unavailable_with_its_last_words() -> None:
    script = "import sys; print('missing API_KEY', file=sys.stderr); sys.exit(1)"
    server = McpServer(name="broken", command=[sys.executable, "-c", script])
    with pytest.raises(StepFailure) as info:
        await McpConnector().list_tools(server)
    failure = info.value
    assert (failure.info.code, failure.retryable) == ("mcp_unavailable", True)
    assert "closed the connection before answering" in failure.info.message
    assert failure.info.details["stderr"] == "missing API_KEY" and "missing API_KEY" in failure.info.message


async def test_a_stored_credential_reaches_the_server_and_never_the_record(database_url: str) -> None:
    key = "MCP-KEY-" + "9" * 20
    settings = make_settings(database_url, http_allow="127.0.0.1", secret_key=SECRET_KEY)
    eng = await Engine.connect(settings, migrate_schema=False)
    try:
        await eng.credentials.create("mcp-key", {"kind": "api_key", "key": key, "parameter": "X-MCP-Key"})
        async with serve_http(required={"X-MCP-Key": key}) as url:
            with_key = graph(
                "mcp-with-key", mcp_tool("echo", {"text": "hello"}, server="web"),
                mcp_servers=[{"name": "web", "url": url, "credential": "mcp-key"}],
            )  # fmt: skip
            without = graph("mcp-without-key", mcp_tool("echo", {"text": "x"}, server="web"),
                            mcp_servers=[{"name": "web", "url": url}])  # fmt: skip
            done = await run_to_end(eng, with_key)
            refused = await run_to_end(eng, without)
        text = "\n".join(row["t"] for row in await eng.db.pool.fetch("SELECT s::text AS t FROM run_steps s"))
        echoed = [s.output for s in await eng.list_steps(done.id) if s.status == "completed"]
    finally:
        await eng.close()
    assert done.status == "completed", done.error
    assert echoed and echoed[0]["text"] == "hello", "the call went through with the key"
    assert refused.status == "failed", "the server refuses a call without the key"
    assert key not in text, "the key is in no step's record"


async def test_an_oauth2_token_the_server_refuses_is_refreshed_once_and_the_call_made_again(
    database_url: str,
) -> None:
    """The MCP server takes only tokens its OAuth2 server knows; they all expire between two
    runs (the stored token still looks valid): the first call gets 401, the engine asks for a
    new token once, and the node and the agent's listing and call go through with it."""
    settings = make_settings(database_url, http_allow="127.0.0.1", secret_key=SECRET_KEY)
    eng = await Engine.connect(settings, migrate_schema=False)
    try:
        with OAuth2Server(expires_in=3600) as oauth:
            await eng.credentials.create("mcp-oauth", {
                "kind": "oauth2_client_credentials", "token_url": oauth.token_url,
                "client_id": oauth.client_id, "client_secret": oauth.client_secret,
            })  # fmt: skip
            seen: list[str] = []

            def known_token(headers: dict[str, str]) -> bool:
                token = headers.get("authorization", "").removeprefix("Bearer ")
                seen.append(token)
                return token in oauth.valid_access()

            async with serve_http(required=known_token) as url:
                server = {"name": "web", "url": url, "credential": "mcp-oauth"}
                node = graph(
                    "mcp-oauth-node", mcp_tool("echo", {"text": "hi"}, server="web"), mcp_servers=[server]
                )
                first = await run_to_end(eng, node)
                oauth.expire_tokens()
                second = await run_to_end(eng, node)
                grants_for_node = oauth.grants["client_credentials"]
                oauth.expire_tokens()
                model = replies(
                    calls(("web__echo", {"text": "from the agent"})), calls(("complete", {"summary": "ok"}))
                )
                by_agent = await run_to_end(eng, agent("mcp-oauth-agent", [server]), model=model)
                grants_for_agent = oauth.grants["client_credentials"]
            failed = graph(
                "mcp-oauth-deny", mcp_tool("echo", {"text": "x"}, server="web"), mcp_servers=[server]
            )
            async with serve_http(required=lambda _h: False) as url:
                failed["mcp_servers"] = [{**server, "url": url}]
                refused = await run_to_end(eng, failed)
        text = "\n".join(row["t"] for row in await eng.db.pool.fetch("SELECT s::text AS t FROM run_steps s"))
    finally:
        await eng.close()
    assert first.status == second.status == "completed", (first.error, second.error)
    assert by_agent.status == "completed", by_agent.error
    assert grants_for_node == 2, "one token at first, one refresh after the 401"
    assert grants_for_agent == 3, "the agent's listing refreshed once more, its call reused it"
    assert refused.status == "failed" and refused.error["details"]["http_status"] == 401
    assert oauth.grants["client_credentials"] == 4, "a server that refuses every token: one refresh, no loop"
    assert all(token not in text for token in seen if token), "no token is in any step's record"
