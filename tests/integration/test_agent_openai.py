"""An agent run through the real OpenAI SDK, against a local server that speaks its protocol.

The worker resolves ``model: openai:gpt-4o-mini`` from the settings (key, base URL, the guarded
HTTP client with loopback allowed), sends the context and the tools, executes the tool call the
server answers with, sends its result back, and records tokens and USD from the price table.
"""

from __future__ import annotations

import json
from decimal import Decimal

from agentflow.core.chat import Usage
from agentflow.core.pricing import PriceTable
from agentflow.engine import Engine
from tests.conftest import make_settings
from tests.support.agents import agent_workflow, running_worker, until
from tests.support.vendor_servers import Reply, openai_completion, vendor_server


async def test_an_agent_run_on_the_openai_sdk_records_calls_tokens_and_cost(database_url: str) -> None:
    async with vendor_server() as server:
        settings = make_settings(
            database_url, openai_api_key="sk-test", openai_base_url=f"{server.url}/v1", http_allow="127.0.0.1"
        )
        engine = await Engine.connect(settings, migrate_schema=False)
        try:
            server.queue(
                Reply(body=openai_completion(
                    tool_calls=[("call_1", "create_task", json.dumps({"title": "Send the SSO guide", "due_in": "1d"}))],
                    prompt_tokens=1200, completion_tokens=30, cached_tokens=200,
                )),
                Reply(body=openai_completion(
                    tool_calls=[("call_2", "complete", json.dumps({"summary": "Task created."}))],
                    prompt_tokens=1300, completion_tokens=20,
                )),
            )  # fmt: skip
            await engine.publish_workflow(agent_workflow(model="openai:gpt-4o-mini"))
            async with running_worker(engine):
                run = await engine.start_run("meeting-follow-up", {"note": "from the meeting"})
                done = await until(engine, run.id, lambda r: r.status.is_terminal)
        finally:
            await engine.close()
    assert done.status == "completed", done.error
    assert done.output["summary"] == "Task created."
    first, second = (r.body for r in server.requests)
    assert first["model"] == "gpt-4o-mini"
    assert "Turn the action items" in first["messages"][0]["content"]
    assert {t["function"]["name"] for t in first["tools"]} >= {"create_task", "wait", "complete"}
    tool_result = next(m for m in second["messages"] if m["role"] == "tool")
    assert tool_result["tool_call_id"] == "call_1" and "Send the SSO guide" in tool_result["content"]
    prices = PriceTable()
    expected = prices.cost("gpt-4o-mini-2024-07-18", Usage(1200, 30, 200)) + prices.cost(
        "gpt-4o-mini-2024-07-18", Usage(1300, 20, 0)
    )
    assert expected > 0
    assert (done.input_tokens, done.output_tokens, done.cached_input_tokens) == (2500, 50, 200)
    assert abs(done.usd_cost - Decimal(str(round(expected, 6)))) < Decimal("0.000002")
    assert [c["key_type"] for c in done.costs] == ["openai:gpt-4o-mini"]
    assert done.costs[0]["calls"] == 2
