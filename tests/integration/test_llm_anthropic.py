"""The Anthropic adapter against a local server that speaks the Messages API, through the real SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from agentflow.core.chat import Message, ModelRequest, ToolCall, ToolSchema, Usage
from agentflow.integrations.guarded_http import guarded_client
from agentflow.llm.anthropic import AnthropicProvider
from agentflow.llm.base import ModelError
from tests.support.vendor_servers import (
    Reply,
    VendorServer,
    anthropic_error,
    anthropic_message,
    text_block,
    tool_use_block,
    vendor_server,
)

WEATHER = ToolSchema(
    "get_weather",
    "Current weather in a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TIME = ToolSchema(
    "get_time", "Current time in a timezone", {"type": "object", "properties": {"tz": {"type": "string"}}}
)
ASK = (Message("system", "You are terse."), Message("user", "Weather in Paris and Rome?"))


@pytest.fixture(scope="module")
async def shared_server() -> AsyncIterator[VendorServer]:
    async with vendor_server() as srv:
        yield srv


@pytest.fixture
def server(shared_server: VendorServer) -> Iterator[VendorServer]:
    shared_server.reset()
    yield shared_server
    shared_server.reset()


def provider(server: VendorServer, **kwargs: object) -> AnthropicProvider:
    options: dict[str, object] = {
        "api_key": "sk-ant-test",
        "base_url": server.url,
        "timeout": 5.0,
        "max_retries": 2,
    }
    options.update(kwargs)
    return AnthropicProvider(**options)  # type: ignore[arg-type]


async def test_tools_and_tool_results_use_the_messages_format(server: VendorServer) -> None:
    server.queue(
        Reply(
            body=anthropic_message(
                [
                    text_block("Checking both."),
                    tool_use_block("toolu_1", "get_weather", {"city": "Paris"}),
                    tool_use_block("toolu_2", "get_weather", {"city": "Rome"}),
                ],
                input_tokens=20,
                output_tokens=30,
                cache_read=100,
                cache_creation=5,
            )
        ),
        Reply(body=anthropic_message([text_block("Sunny in both.")], input_tokens=180, output_tokens=8)),
    )
    llm = provider(server)

    first = await llm.request(
        ModelRequest("claude-sonnet-4-6", ASK, tools=(WEATHER, TIME), max_output_tokens=500)
    )

    sent = server.requests[0]
    assert sent.path == "/v1/messages"
    # The SDK sends the key as x-api-key or, in recent versions, as a bearer token.
    assert "sk-ant-test" in (
        sent.headers.get("x-api-key"),
        sent.headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert sent.body["system"] == "You are terse."
    assert sent.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]}
    ]
    assert sent.body["tools"] == [
        {"name": "get_weather", "description": WEATHER.description, "input_schema": WEATHER.parameters},
        {"name": "get_time", "description": TIME.description, "input_schema": TIME.parameters},
    ]
    assert sent.body["max_tokens"] == 500
    assert "temperature" not in sent.body
    assert first.message.content == "Checking both."
    assert first.message.tool_calls == (
        ToolCall("toolu_1", "get_weather", {"city": "Paris"}),
        ToolCall("toolu_2", "get_weather", {"city": "Rome"}),
    )
    # input_tokens counts the whole prompt: uncached + cache reads + cache writes.
    assert first.usage == Usage(input_tokens=125, output_tokens=30, cached_input_tokens=100)
    assert (first.provider, first.model, first.finish_reason) == (
        "anthropic",
        "claude-sonnet-4-5-20250929",
        "tool_use",
    )

    follow_up = (
        *ASK,
        first.message,
        Message("tool", "18 C, sunny", tool_call_id="toolu_1", name="get_weather"),
        Message("tool", "24 C, sunny", tool_call_id="toolu_2", name="get_weather"),
    )
    second = await llm.request(
        ModelRequest(
            "claude-sonnet-4-6", follow_up, tools=(WEATHER, TIME), temperature=0.3, top_p=0.8, stop=("END",)
        )
    )

    body = server.requests[1].body
    assert (body["temperature"], body["top_p"], body["stop_sequences"]) == (0.3, 0.8, ["END"])
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
            ],
        },
        # Both results in one user turn, as the API requires.
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C, sunny"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "24 C, sunny"},
            ],
        },
    ]
    assert second.message.content == "Sunny in both." and second.message.tool_calls == ()


async def test_tool_only_turns_send_no_empty_text(server: VendorServer) -> None:
    server.queue(Reply(body=anthropic_message([text_block("ok")])))
    history = (
        *ASK,
        Message("assistant", "", (ToolCall("toolu_9", "get_time", {}),)),
        Message("tool", "12:00", tool_call_id="toolu_9"),
    )

    await provider(server).request(ModelRequest("claude-haiku-4-5", history))

    assert server.requests[0].body["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_9", "name": "get_time", "input": {}}],
    }


async def test_structured_output_sends_a_json_schema_and_parses_the_answer(server: VendorServer) -> None:
    schema = {
        "type": "object",
        "properties": {"label": {"type": "string", "minLength": 2}},
        "required": ["label"],
    }
    server.queue(
        Reply(body=anthropic_message([text_block('{"label": "spam"}')])),
        Reply(body=anthropic_message([text_block("nope")])),
    )
    llm = provider(server)

    response = await llm.request(ModelRequest("claude-sonnet-4-6", ASK, output_schema=schema))

    output_format = server.requests[0].body["output_config"]["format"]
    assert output_format["type"] == "json_schema"
    assert output_format["schema"]["additionalProperties"] is False  # what the API requires
    assert output_format["schema"]["required"] == ["label"]
    assert response.structured == {"label": "spam"}
    with pytest.raises(ModelError) as caught:
        await llm.request(ModelRequest("claude-sonnet-4-6", ASK, output_schema=schema))
    assert caught.value.code == "model_bad_output"


@pytest.mark.parametrize(
    ("status", "retry_after"), [(429, "1"), (529, "http-date")], ids=["429-seconds", "529-http-date"]
)
async def test_retry_honours_retry_after(server: VendorServer, status: int, retry_after: str) -> None:
    # A date is taken when the server answers: one taken now could be near by then on a busy machine.
    error = anthropic_error("rate_limit_error", "slow down")
    server.queue(
        Reply(status, error, retry_after_in=2)
        if retry_after == "http-date"
        else Reply(status, error, {"Retry-After": retry_after}),
        Reply(body=anthropic_message([text_block("ok")])),
    )

    response = await provider(server).request(ModelRequest("claude-sonnet-4-6", ASK))

    assert response.message.content == "ok"
    assert len(server.requests) == 2
    assert server.gaps()[0] >= 0.9


async def test_rate_limit_without_retries_is_retryable(server: VendorServer) -> None:
    server.queue(
        Reply(
            429, anthropic_error("rate_limit_error", "Number of request tokens has exceeded your rate limit")
        )
    )

    with pytest.raises(ModelError) as caught:
        await provider(server, max_retries=0).request(ModelRequest("claude-sonnet-4-6", ASK))

    assert (caught.value.code, caught.value.retryable) == ("model_rate_limited", True)
    assert "exceeded your rate limit" in caught.value.message
    assert caught.value.details["vendor_code"] == "rate_limit_error"
    assert len(server.requests) == 1


async def test_rejected_key_is_auth_failed_and_not_retried(server: VendorServer) -> None:
    server.queue(Reply(401, anthropic_error("authentication_error", "invalid x-api-key")))

    with pytest.raises(ModelError) as caught:
        await provider(server).request(ModelRequest("claude-sonnet-4-6", ASK))

    assert (caught.value.code, caught.value.retryable) == ("model_auth_failed", False)
    assert "ANTHROPIC_API_KEY" in caught.value.message
    assert len(server.requests) == 1


async def test_hanging_server_times_out(server: VendorServer) -> None:
    server.queue(Reply(hang=True))

    with pytest.raises(ModelError) as caught:
        await provider(server, timeout=0.5, max_retries=0).request(ModelRequest("claude-sonnet-4-6", ASK))

    assert (caught.value.code, caught.value.retryable) == ("model_timeout", True)


async def test_hanging_server_through_the_given_client_times_out(server: VendorServer) -> None:
    # The httpx -> httpx2 bridge must carry the SDK's timeout and report it as a timeout.
    server.queue(Reply(hang=True))

    async with httpx.AsyncClient() as client:
        llm = provider(server, timeout=0.5, max_retries=0, http_client=client)
        with pytest.raises(ModelError) as caught:
            await llm.request(ModelRequest("claude-sonnet-4-6", ASK))

    assert caught.value.code == "model_timeout"


async def test_the_guarded_client_refuses_a_private_base_url_for_good(server: VendorServer) -> None:
    async with guarded_client() as client:
        with pytest.raises(ModelError) as caught:
            await provider(server, http_client=client).request(ModelRequest("claude-sonnet-4-6", ASK))

    assert (caught.value.code, caught.value.retryable) == ("model_unavailable", False)
    assert caught.value.details["cause_code"] == "destination_blocked"
    assert server.requests == []


async def test_requests_go_through_the_guarded_client_when_allowed(server: VendorServer) -> None:
    # Anthropic's SDK takes only httpx2 clients: this crosses the httpx -> httpx2 bridge.
    server.queue(Reply(body=anthropic_message([text_block("hi")], input_tokens=7, output_tokens=2)))

    async with guarded_client(allow=["127.0.0.1"]) as client:
        llm = provider(server, http_client=client)
        response = await llm.request(ModelRequest("claude-sonnet-4-6", ASK))
        await llm.aclose()
        assert not client.is_closed

    assert response.message.content == "hi"
    assert response.usage == Usage(7, 2, 0)


def test_missing_key_is_reported_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE"):
        monkeypatch.delenv(name, raising=False)

    with pytest.raises(ModelError) as caught:
        AnthropicProvider(None)

    assert caught.value.code == "model_auth_missing"
    assert "AGENTFLOW_ANTHROPIC_API_KEY or ANTHROPIC_API_KEY" in caught.value.message
