"""The Gemini adapter against a local server that speaks generateContent, through the real google-genai SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from agentflow.core.chat import Message, ModelRequest, ToolCall, ToolSchema, Usage
from agentflow.integrations.guarded_http import guarded_client
from agentflow.llm.base import ModelError
from agentflow.llm.gemini import GeminiProvider
from tests.support.vendor_servers import (
    Reply,
    VendorServer,
    function_call_part,
    gemini_embeddings,
    gemini_error,
    gemini_response,
    text_part,
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
SIGNATURE = "c2lnbmVkIGJ5IGdlbWluaQ=="  # base64 of "signed by gemini"


@pytest.fixture(scope="module")
async def shared_server() -> AsyncIterator[VendorServer]:
    async with vendor_server() as srv:
        yield srv


@pytest.fixture
def server(shared_server: VendorServer) -> Iterator[VendorServer]:
    shared_server.reset()
    yield shared_server
    shared_server.reset()


def provider(server: VendorServer, **kwargs: object) -> GeminiProvider:
    options: dict[str, object] = {
        "api_key": "gm-test",
        "base_url": server.url,
        "timeout": 5.0,
        "max_retries": 2,
    }
    options.update(kwargs)
    return GeminiProvider(**options)  # type: ignore[arg-type]


def declared_schema(declaration: dict[str, Any]) -> Any:
    # The SDK sends the schema as parameters_json_schema (protobuf JSON accepts either spelling).
    return declaration.get("parametersJsonSchema", declaration.get("parameters_json_schema"))


async def test_tools_and_tool_results_use_the_generate_content_format(server: VendorServer) -> None:
    server.queue(
        Reply(
            body=gemini_response(
                [
                    text_part("Let me check."),
                    function_call_part("get_weather", {"city": "Paris"}, signature=SIGNATURE),
                ],
                prompt_tokens=300,
                output_tokens=12,
                cached_tokens=256,
                thoughts_tokens=40,
            )
        ),
        Reply(body=gemini_response([text_part("Sunny, 21 C.")], prompt_tokens=330, output_tokens=6)),
    )
    llm = provider(server)

    first = await llm.request(
        ModelRequest(
            "gemini-2.5-flash", ASK, tools=(WEATHER, TIME), temperature=0.1, top_p=0.7, stop=("END",)
        )
    )

    sent = server.requests[0]
    assert sent.path.endswith("/models/gemini-2.5-flash:generateContent")
    assert sent.headers["x-goog-api-key"] == "gm-test"
    assert sent.body["systemInstruction"]["parts"] == [{"text": "You are terse."}]
    assert sent.body["contents"] == [{"role": "user", "parts": [{"text": "Weather in Paris?"}]}]
    declarations = sent.body["tools"][0]["functionDeclarations"]
    assert [(d["name"], d["description"], declared_schema(d)) for d in declarations] == [
        ("get_weather", WEATHER.description, WEATHER.parameters),
        ("get_time", TIME.description, TIME.parameters),
    ]
    assert sent.body["generationConfig"] == {
        "temperature": 0.1,
        "topP": 0.7,
        "stopSequences": ["END"],
        "maxOutputTokens": 2048,
    }
    assert first.message.content == "Let me check."
    [call] = first.message.tool_calls
    assert (call.name, call.arguments) == ("get_weather", {"city": "Paris"})
    # Thinking tokens are billed as output.
    assert first.usage == Usage(input_tokens=300, output_tokens=52, cached_input_tokens=256)
    assert (first.provider, first.model, first.finish_reason) == ("gemini", "gemini-2.0-flash-001", "STOP")

    # The call as the agent loop checkpoints and rebuilds it: only id, name and arguments survive.
    stored = ToolCall.from_json(call.to_json())
    follow_up = (
        *ASK,
        Message("assistant", first.message.content, (stored,)),
        Message("tool", '{"temp_c": 21}', tool_call_id=stored.id),  # no name: found from the call
    )
    second = await llm.request(ModelRequest("gemini-2.5-flash", follow_up, tools=(WEATHER, TIME)))

    contents = server.requests[1].body["contents"]
    assert contents[1] == {
        "role": "model",
        "parts": [
            {"text": "Let me check."},
            # The thought signature goes back with its call (Gemini 3 refuses the turn without it).
            {
                "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                "thoughtSignature": SIGNATURE,
            },
        ],
    }
    assert contents[2] == {
        "role": "user",
        "parts": [{"functionResponse": {"name": "get_weather", "response": {"output": '{"temp_c": 21}'}}}],
    }
    assert second.message.content == "Sunny, 21 C." and second.message.tool_calls == ()


async def test_parallel_calls_get_distinct_ids_and_results_go_back_together(server: VendorServer) -> None:
    server.queue(
        Reply(
            body=gemini_response(
                [
                    function_call_part("get_weather", {"city": "Paris"}),
                    function_call_part("get_time", {"tz": "CET"}),
                ]
            )
        ),
        Reply(body=gemini_response([text_part("done")])),
    )
    llm = provider(server)

    first = await llm.request(ModelRequest("gemini-2.0-flash", ASK, tools=(WEATHER, TIME)))
    ids = [c.id for c in first.message.tool_calls]
    assert len(set(ids)) == 2
    results = tuple(Message("tool", f"r{n}", tool_call_id=i) for n, i in enumerate(ids))
    await llm.request(ModelRequest("gemini-2.0-flash", (*ASK, first.message, *results)))

    last = server.requests[1].body["contents"][-1]
    assert last["role"] == "user"
    assert [p["functionResponse"]["name"] for p in last["parts"]] == ["get_weather", "get_time"]


async def test_malformed_arguments_never_crash(server: VendorServer) -> None:
    server.queue(Reply(body=gemini_response([{"functionCall": {"name": "get_time"}}])))

    response = await provider(server).request(ModelRequest("gemini-2.0-flash", ASK, tools=(TIME,)))

    assert [(c.name, c.arguments) for c in response.message.tool_calls] == [("get_time", {})]


async def test_structured_output_sends_a_json_schema_and_parses_the_answer(server: VendorServer) -> None:
    schema = {"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]}
    server.queue(
        Reply(body=gemini_response([text_part('{"label": '), text_part('"spam"}')])),
        Reply(body=gemini_response([text_part('{"label": "sp')], finish_reason="MAX_TOKENS")),
    )
    llm = provider(server)

    response = await llm.request(ModelRequest("gemini-2.0-flash", ASK, output_schema=schema))

    config = server.requests[0].body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == schema
    assert response.structured == {"label": "spam"}
    with pytest.raises(ModelError) as caught:
        await llm.request(ModelRequest("gemini-2.0-flash", ASK, output_schema=schema))
    assert caught.value.code == "model_bad_output"
    assert "max_output_tokens" in caught.value.message


@pytest.mark.parametrize(
    ("status", "wait"),
    [(429, "header:1"), (503, "http-date"), (429, "retry-info:1s")],
    ids=["429-seconds", "503-http-date", "429-retry-info"],
)
async def test_retry_honours_the_requested_wait(server: VendorServer, status: int, wait: str) -> None:
    body = gemini_error(status, "RESOURCE_EXHAUSTED" if status == 429 else "UNAVAILABLE", "slow down")
    headers: dict[str, str] = {}
    date_in = 2.0 if wait == "http-date" else None  # dated when the server answers
    if wait.startswith("header:"):
        headers["Retry-After"] = wait.removeprefix("header:")
    elif wait.startswith("retry-info:"):  # Gemini's own form: a RetryInfo detail in the error body
        delay = wait.removeprefix("retry-info:")
        body["error"]["details"] = [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}
        ]
    server.queue(
        Reply(status, body, headers, retry_after_in=date_in), Reply(body=gemini_response([text_part("ok")]))
    )

    response = await provider(server).request(ModelRequest("gemini-2.0-flash", ASK))

    assert response.message.content == "ok"
    assert len(server.requests) == 2
    assert server.gaps()[0] >= 0.9


async def test_rate_limit_without_retries_is_retryable(server: VendorServer) -> None:
    server.queue(
        Reply(429, gemini_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded for metric"), {"Retry-After": "3"})
    )

    with pytest.raises(ModelError) as caught:
        await provider(server, max_retries=0).request(ModelRequest("gemini-2.0-flash", ASK))

    error = caught.value
    assert (error.code, error.retryable, error.retry_after) == ("model_rate_limited", True, 3.0)
    assert "Quota exceeded" in error.message
    assert len(server.requests) == 1


async def test_rejected_key_is_auth_failed_and_not_retried(server: VendorServer) -> None:
    server.queue(Reply(401, gemini_error(401, "UNAUTHENTICATED", "API key not valid")))

    with pytest.raises(ModelError) as caught:
        await provider(server).request(ModelRequest("gemini-2.0-flash", ASK))

    assert (caught.value.code, caught.value.retryable) == ("model_auth_failed", False)
    assert "GEMINI_API_KEY" in caught.value.message
    assert len(server.requests) == 1


async def test_hanging_server_times_out(server: VendorServer) -> None:
    server.queue(Reply(hang=True))

    with pytest.raises(ModelError) as caught:
        await provider(server, timeout=0.5, max_retries=0).request(ModelRequest("gemini-2.0-flash", ASK))

    assert (caught.value.code, caught.value.retryable) == ("model_timeout", True)


async def test_the_guarded_client_refuses_a_private_base_url_for_good(server: VendorServer) -> None:
    async with guarded_client() as client:
        with pytest.raises(ModelError) as caught:
            await provider(server, http_client=client).request(ModelRequest("gemini-2.0-flash", ASK))

    assert (caught.value.code, caught.value.retryable) == ("model_unavailable", False)
    assert caught.value.details["cause_code"] == "destination_blocked"
    assert server.requests == []


async def test_requests_go_through_the_guarded_client_when_allowed(server: VendorServer) -> None:
    server.queue(Reply(body=gemini_response([text_part("hi")], prompt_tokens=4, output_tokens=1)))

    async with guarded_client(allow=["127.0.0.1"]) as client:
        llm = provider(server, http_client=client)
        response = await llm.request(ModelRequest("gemini-2.0-flash", ASK))
        await llm.aclose()
        assert not client.is_closed

    assert response.message.content == "hi"
    assert response.usage == Usage(4, 1, 0)


async def test_embeddings(server: VendorServer) -> None:
    server.queue(Reply(body=gemini_embeddings([[0.1, 0.2], [0.3, 0.4]])))

    vectors = await provider(server).embed(["a", "b"])

    assert vectors == [[0.1, 0.2], [0.3, 0.4]]
    assert server.requests[0].path.endswith("/models/gemini-embedding-001:batchEmbedContents")
    assert [r["content"]["parts"][0]["text"] for r in server.requests[0].body["requests"]] == ["a", "b"]


def test_missing_key_is_reported_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI"):
        monkeypatch.delenv(name, raising=False)

    with pytest.raises(ModelError) as caught:
        GeminiProvider(None)

    assert caught.value.code == "model_auth_missing"
    assert "AGENTFLOW_GEMINI_API_KEY or GEMINI_API_KEY" in caught.value.message
