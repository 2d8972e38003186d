"""The Anthropic and Gemini adapters stream an answer's text as it is written (issue 12), through
their official SDKs against a local server that streams as the vendor does; the answer they
return is the one ``request`` would have returned, and a retried attempt starts the sink again."""

from __future__ import annotations

import pytest

from agentflow.core.chat import Message, ModelRequest, ToolSchema
from agentflow.llm.anthropic import AnthropicProvider
from agentflow.llm.base import ModelError
from agentflow.llm.gemini import GeminiProvider
from agentflow.llm.streaming import StreamingProvider, ask
from tests.support.vendor_servers import (
    Reply,
    anthropic_error,
    anthropic_events,
    function_call_part,
    gemini_chunks,
    gemini_error,
    vendor_server,
)

WEATHER = ToolSchema("get_weather", "Weather", {"type": "object", "properties": {"city": {"type": "string"}}})
ASK = ModelRequest("m", (Message("system", "Be brief."), Message("user", "Weather in Paris?")), (WEATHER,))


class Collected:
    """A sink that keeps what it is fed."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.restarts = 0

    def restart(self) -> None:
        self.restarts += 1
        self.pieces.clear()

    def text(self, chunk: str) -> None:
        self.pieces.append(chunk)


async def test_anthropic_streams_text_then_returns_the_whole_message_with_its_tool_call() -> None:
    async with vendor_server() as server:
        server.queue(
            Reply(status=529, body=anthropic_error("overloaded_error", "Overloaded")),
            Reply(
                sse=anthropic_events(
                    ["Checking ", "the weather", "."],
                    ("toolu_1", "get_weather", ['{"ci', 'ty": "Par', 'is"}']),
                    input_tokens=21,
                    output_tokens=9,
                )
            ),
        )
        provider = AnthropicProvider(api_key="sk-ant-test", base_url=server.url, timeout=5.0, max_retries=2)
        assert isinstance(provider, StreamingProvider)
        sink = Collected()
        response = await ask(provider, ASK, sink)
        await provider.aclose()
        sent = server.requests[-1].body
    assert (
        sent["stream"] is True and sent["system"] == "Be brief." and sent["tools"][0]["name"] == "get_weather"
    )
    assert sink.pieces == ["Checking ", "the weather", "."] and sink.restarts == 2  # the 529, then the stream
    assert response.message.content == "Checking the weather."
    (call,) = response.message.tool_calls
    assert (call.id, call.name, call.arguments) == ("toolu_1", "get_weather", {"city": "Paris"})
    assert (response.usage.input_tokens, response.usage.output_tokens) == (21, 9)
    assert (response.finish_reason, response.provider) == ("tool_use", "anthropic")


async def test_anthropic_stream_errors_are_model_errors() -> None:
    async with vendor_server() as server:
        server.queue(Reply(status=401, body=anthropic_error("authentication_error", "invalid x-api-key")))
        provider = AnthropicProvider(api_key="sk-ant-bad", base_url=server.url, timeout=5.0, max_retries=0)
        with pytest.raises(ModelError) as failed:
            await provider.stream(ASK, Collected())
        await provider.aclose()
    assert failed.value.code == "model_auth_failed"


async def test_gemini_streams_text_then_returns_the_whole_answer_with_its_function_call() -> None:
    async with vendor_server() as server:
        server.queue(
            Reply(status=503, body=gemini_error(503, "UNAVAILABLE", "The model is overloaded.")),
            Reply(
                sse=gemini_chunks(
                    ["Checking ", "the weather."],
                    [function_call_part("get_weather", {"city": "Paris"}, call_id="fc1")],
                    prompt_tokens=30,
                    output_tokens=12,
                )
            ),
        )
        provider = GeminiProvider(api_key="g-test", base_url=server.url, timeout=5.0, max_retries=2)
        assert isinstance(provider, StreamingProvider)
        sink = Collected()
        response = await ask(provider, ASK, sink)
        await provider.aclose()
        streamed = server.requests[-1]
    assert streamed.path.endswith(":streamGenerateContent") and streamed.query.get("alt") == "sse"
    assert streamed.body["systemInstruction"]["parts"][0]["text"] == "Be brief."
    assert sink.pieces == ["Checking ", "the weather."] and sink.restarts == 2
    assert response.message.content == "Checking the weather."
    (call,) = response.message.tool_calls
    assert (call.name, call.arguments) == ("get_weather", {"city": "Paris"})
    assert (response.usage.input_tokens, response.usage.output_tokens) == (30, 12)
    assert (response.finish_reason, response.provider) == ("STOP", "gemini")


async def test_a_gemini_stream_that_says_nothing_is_bad_output() -> None:
    async with vendor_server() as server:
        server.queue(Reply(sse=[(None, {"candidates": [], "promptFeedback": {}})]))
        provider = GeminiProvider(api_key="g-test", base_url=server.url, timeout=5.0, max_retries=0)
        with pytest.raises(ModelError) as failed:
            await provider.stream(ASK, Collected())
        await provider.aclose()
    assert failed.value.code == "model_bad_output"
