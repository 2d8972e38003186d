"""The OpenAI adapter against a local server that speaks chat completions, through the real SDK."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import httpx
import pytest

from agentflow.core.chat import Message, ModelRequest, ToolCall, ToolSchema, Usage
from agentflow.integrations.guarded_http import guarded_client
from agentflow.llm.base import ModelError
from agentflow.llm.openai import OpenAIProvider
from agentflow.llm.retrying import retry_after_seconds
from tests.support.vendor_servers import (
    Reply,
    VendorServer,
    openai_completion,
    openai_embeddings,
    openai_error,
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
ASK = (Message("system", "You are terse."), Message("user", "Weather in Paris?"))


@pytest.fixture(scope="module")
async def shared_server() -> AsyncIterator[VendorServer]:
    async with vendor_server() as srv:
        yield srv


@pytest.fixture
def server(shared_server: VendorServer) -> Iterator[VendorServer]:
    shared_server.reset()
    yield shared_server
    shared_server.reset()


def provider(server: VendorServer, **kwargs: object) -> OpenAIProvider:
    options: dict[str, object] = {
        "api_key": "sk-test",
        "base_url": f"{server.url}/v1",
        "timeout": 5.0,
        "max_retries": 2,
    }
    options.update(kwargs)
    return OpenAIProvider(**options)  # type: ignore[arg-type]


async def test_tools_and_tool_results_use_the_chat_completions_format(server: VendorServer) -> None:
    server.queue(
        Reply(
            body=openai_completion(
                None,
                [("call_1", "get_weather", '{"city": "Paris"}')],
                prompt_tokens=120,
                completion_tokens=17,
                cached_tokens=64,
            )
        ),
        Reply(body=openai_completion("Sunny, 21 C.", prompt_tokens=150, completion_tokens=6)),
    )
    llm = provider(server)

    first = await llm.request(ModelRequest("gpt-4o-mini", ASK, tools=(WEATHER, TIME), temperature=0.2))

    sent = server.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.body["model"] == "gpt-4o-mini"
    assert sent.body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    assert sent.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": WEATHER.description,
                "parameters": WEATHER.parameters,
            },
        },
        {
            "type": "function",
            "function": {"name": "get_time", "description": TIME.description, "parameters": TIME.parameters},
        },
    ]
    assert sent.body["temperature"] == 0.2
    # A custom base_url is an OpenAI-compatible server: the classic max_tokens.
    assert sent.body["max_tokens"] == 2048 and "max_completion_tokens" not in sent.body
    assert first.message.tool_calls == (ToolCall("call_1", "get_weather", {"city": "Paris"}),)
    assert first.usage == Usage(input_tokens=120, output_tokens=17, cached_input_tokens=64)
    assert (first.provider, first.model, first.finish_reason) == (
        "openai",
        "gpt-4o-mini-2024-07-18",
        "tool_calls",
    )

    follow_up = (
        *ASK,
        first.message,
        Message("tool", '{"temp_c": 21}', tool_call_id="call_1", name="get_weather"),
    )
    second = await llm.request(ModelRequest("gpt-4o-mini", follow_up, tools=(WEATHER, TIME)))

    messages = server.requests[1].body["messages"]
    assert messages[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    assert messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'}
    assert second.message.content == "Sunny, 21 C." and second.message.tool_calls == ()


async def test_malformed_tool_arguments_are_kept_unparsed(server: VendorServer) -> None:
    server.queue(
        Reply(body=openai_completion(None, [("c1", "get_weather", '{"city": "Par'), ("c2", "get_time", "")]))
    )

    response = await provider(server).request(ModelRequest("gpt-4o-mini", ASK, tools=(WEATHER, TIME)))

    assert response.message.tool_calls == (
        ToolCall("c1", "get_weather", {"_unparsed": '{"city": "Par'}),
        ToolCall("c2", "get_time", {}),
    )


async def test_structured_output_sends_a_json_schema_and_parses_the_answer(server: VendorServer) -> None:
    schema = {"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]}
    server.queue(
        Reply(body=openai_completion('{"label": "spam"}')), Reply(body=openai_completion("not json"))
    )
    llm = provider(server)

    response = await llm.request(ModelRequest("gpt-4o-mini", ASK, output_schema=schema))

    assert server.requests[0].body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": False},
    }
    assert response.structured == {"label": "spam"}
    with pytest.raises(ModelError) as caught:
        await llm.request(ModelRequest("gpt-4o-mini", ASK, output_schema=schema))
    assert caught.value.code == "model_bad_output"
    assert len(server.requests) == 2  # bad output is the caller's to retry, not the transport's


async def test_a_compatible_server_that_refuses_json_schema_gets_json_mode_with_the_schema(
    server: VendorServer,
) -> None:
    """llama.cpp's Python server answers 500 to response_format json_schema: the provider asks
    again at once with JSON mode and the schema (its grammar), and from then on only so; a
    request without a schema, or a refusal about something else, is not asked again."""
    schema = {"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]}
    refusal = "Input should be 'text' or 'json_object' ('body', 'response_format', 'type'): 'json_schema'"
    server.queue(
        Reply(500, openai_error(refusal, "server_error")),
        Reply(body=openai_completion('{"label": "spam"}')),
        Reply(body=openai_completion('{"label": "ham"}')),
        Reply(500, openai_error("model crashed", "server_error")),
    )
    llm = provider(server, max_retries=0)
    first = await llm.request(ModelRequest("smollm2", ASK, output_schema=schema))
    second = await llm.request(ModelRequest("smollm2", ASK, output_schema=schema))
    with pytest.raises(ModelError) as other:
        await llm.request(ModelRequest("smollm2", ASK, output_schema=schema))
    formats = [r.body.get("response_format") for r in server.requests]
    assert formats[0]["type"] == "json_schema"
    assert formats[1:] == [{"type": "json_object", "schema": schema}] * 3
    assert (first.structured, second.structured) == ({"label": "spam"}, {"label": "ham"})
    assert other.value.code == "model_unavailable" and len(server.requests) == 4, "a crash is not asked again"


async def test_openai_itself_gets_max_completion_tokens() -> None:
    # Through a client whose transport is a handler: the URL stays api.openai.com.
    seen: list[dict[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=openai_completion("hi"))

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        llm = OpenAIProvider("sk-test", http_client=client, max_retries=0)
        await llm.request(ModelRequest("o3-mini", ASK, max_output_tokens=99))
    assert seen[0]["max_completion_tokens"] == 99 and "max_tokens" not in seen[0]


@pytest.mark.parametrize(
    ("status", "retry_after"), [(429, "1"), (503, "http-date")], ids=["429-seconds", "503-http-date"]
)
async def test_retry_honours_retry_after(server: VendorServer, status: int, retry_after: str) -> None:
    # An HTTP date at least two seconds after the server answers (a date taken when queueing
    # could be near by then on a busy machine): more than a second away when the client reads it.
    error = openai_error("slow down", "requests", "rate_limit_exceeded")
    server.queue(
        Reply(status, error, retry_after_in=2)
        if retry_after == "http-date"
        else Reply(status, error, {"Retry-After": retry_after}),
        Reply(body=openai_completion("ok")),
    )

    response = await provider(server).request(ModelRequest("gpt-4o-mini", ASK))

    assert response.message.content == "ok"
    assert len(server.requests) == 2
    assert server.gaps()[0] >= 0.9


async def test_rate_limit_without_retries_is_retryable(server: VendorServer) -> None:
    server.queue(
        Reply(
            429, openai_error("Rate limit reached", "requests", "rate_limit_exceeded"), {"Retry-After": "7"}
        )
    )

    with pytest.raises(ModelError) as caught:
        await provider(server, max_retries=0).request(ModelRequest("gpt-4o-mini", ASK))

    error = caught.value
    assert (error.code, error.retryable, error.retry_after) == ("model_rate_limited", True, 7.0)
    assert "Rate limit reached" in error.message
    assert len(server.requests) == 1


async def test_spent_quota_is_not_retried(server: VendorServer) -> None:
    server.queue(
        Reply(
            429, openai_error("You exceeded your current quota", "insufficient_quota", "insufficient_quota")
        )
    )

    with pytest.raises(ModelError) as caught:
        await provider(server).request(ModelRequest("gpt-4o-mini", ASK))

    assert (caught.value.code, caught.value.retryable) == ("model_rate_limited", False)
    assert len(server.requests) == 1


async def test_rejected_key_is_auth_failed_and_not_retried(server: VendorServer) -> None:
    server.queue(
        Reply(401, openai_error("Incorrect API key provided", "invalid_request_error", "invalid_api_key"))
    )

    with pytest.raises(ModelError) as caught:
        await provider(server).request(ModelRequest("gpt-4o-mini", ASK))

    assert (caught.value.code, caught.value.retryable) == ("model_auth_failed", False)
    assert "OPENAI_API_KEY" in caught.value.message
    assert len(server.requests) == 1


async def test_bad_request_is_not_retried(server: VendorServer) -> None:
    server.queue(Reply(400, openai_error("Invalid schema for function", "invalid_request_error")))

    with pytest.raises(ModelError) as caught:
        await provider(server).request(ModelRequest("gpt-4o-mini", ASK))

    assert (caught.value.code, caught.value.retryable) == ("model_bad_request", False)
    assert "Invalid schema" in caught.value.message


async def test_hanging_server_times_out(server: VendorServer) -> None:
    server.queue(Reply(hang=True))

    with pytest.raises(ModelError) as caught:
        await provider(server, timeout=0.5, max_retries=0).request(ModelRequest("gpt-4o-mini", ASK))

    assert (caught.value.code, caught.value.retryable) == ("model_timeout", True)


async def test_unreachable_server_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        llm = OpenAIProvider("sk-test", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, timeout=2)
        with pytest.raises(ModelError) as caught:
            await llm.request(ModelRequest("gpt-4o-mini", ASK))
    assert (caught.value.code, caught.value.retryable) == ("model_unavailable", True)
    assert f"127.0.0.1:{port}" in caught.value.message


async def test_the_guarded_client_refuses_a_private_base_url_for_good(server: VendorServer) -> None:
    async with guarded_client() as client:
        with pytest.raises(ModelError) as caught:
            await provider(server, http_client=client).request(ModelRequest("gpt-4o-mini", ASK))

    assert (caught.value.code, caught.value.retryable) == ("model_unavailable", False)
    assert caught.value.details["cause_code"] == "destination_blocked"
    assert "AGENTFLOW_HTTP_ALLOW" in caught.value.message
    assert server.requests == []  # refused before connecting, and not retried


async def test_requests_go_through_the_guarded_client_when_allowed(server: VendorServer) -> None:
    server.queue(Reply(body=openai_completion("hi")))

    async with guarded_client(allow=["127.0.0.1"]) as client:
        llm = provider(server, http_client=client)
        response = await llm.request(ModelRequest("gpt-4o-mini", ASK))
        await llm.aclose()
        assert not client.is_closed  # the engine's client is the engine's to close

    assert response.message.content == "hi"
    assert response.usage == Usage(10, 5, 0)


async def test_embeddings_come_back_in_input_order(server: VendorServer) -> None:
    server.queue(Reply(body=openai_embeddings([[0.1, 0.2], [0.3, 0.4]])))

    vectors = await provider(server).embed(["a", "b"])

    assert vectors == [[0.1, 0.2], [0.3, 0.4]]
    assert server.requests[0].path == "/v1/embeddings"
    assert server.requests[0].body["input"] == ["a", "b"]
    assert server.requests[0].body["model"] == "text-embedding-3-small"


def test_missing_key_is_reported_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_ADMIN_KEY", raising=False)

    with pytest.raises(ModelError) as caught:
        OpenAIProvider(None)

    assert caught.value.code == "model_auth_missing"
    assert "AGENTFLOW_OPENAI_API_KEY or OPENAI_API_KEY" in caught.value.message


async def test_a_local_compatible_server_needs_no_key(
    server: VendorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.queue(Reply(body=openai_completion("from llama", model="llama3.1:8b")))

    response = await OpenAIProvider(None, base_url=f"{server.url}/v1").request(
        ModelRequest("llama3.1:8b", ASK)
    )

    assert (response.message.content, response.model) == ("from llama", "llama3.1:8b")
    assert server.requests[0].headers["authorization"] == "Bearer not-needed"


def test_the_standard_variable_supplies_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")

    assert OpenAIProvider(None).name == "openai"


async def test_a_wait_longer_than_a_minute_fails_at_once_for_the_engine_to_wait(server: VendorServer) -> None:
    server.queue(Reply(429, openai_error("come back later", "requests"), {"Retry-After": "120"}))

    with pytest.raises(ModelError) as caught:
        await provider(server, max_retries=3).request(ModelRequest("gpt-4o-mini", ASK))

    assert (caught.value.code, caught.value.retryable, caught.value.retry_after) == (
        "model_rate_limited",
        True,
        120.0,
    )
    assert caught.value.info.details["retry_after"] == 120.0
    assert len(server.requests) == 1


def test_retry_after_forms() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)

    assert retry_after_seconds(httpx.Headers({"Retry-After": "2.5"})) == 2.5
    assert retry_after_seconds(httpx.Headers({"Retry-After": "Wed, 01 Jan 2025 12:00:03 GMT"}), now) == 3.0
    assert retry_after_seconds(httpx.Headers({"Retry-After": "Wed, 01 Jan 2025 11:00:00 GMT"}), now) == 0.0
    assert retry_after_seconds(httpx.Headers({"retry-after-ms": "1500", "Retry-After": "9"})) == 1.5
    assert retry_after_seconds(httpx.Headers({"Retry-After": "-5"})) == 0.0
    assert retry_after_seconds(httpx.Headers({"Retry-After": "soon"})) is None
    assert retry_after_seconds(httpx.Headers({"Retry-After": "nan"})) is None
    assert retry_after_seconds(httpx.Headers()) is None
