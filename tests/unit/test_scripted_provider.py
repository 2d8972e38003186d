"""The scripted provider, and how a model reference picks a provider."""

from __future__ import annotations

import logging

import httpx
import pytest

from agentflow.core.chat import Message, ModelRequest, ModelResponse, ToolCall, ToolSchema, Usage
from agentflow.llm import select as select_module
from agentflow.llm.anthropic import AnthropicProvider
from agentflow.llm.base import Embedder, ModelError, ModelProvider
from agentflow.llm.gemini import GeminiProvider
from agentflow.llm.openai import OpenAIProvider
from agentflow.llm.scripted import Rule, ScriptedProvider
from agentflow.llm.select import provider_for
from agentflow.settings import Settings

TOOL = ToolSchema("t", "d", {})


def ask(text: str, *, earlier: str = "", schema: dict[str, object] | None = None) -> ModelRequest:
    messages = [Message("system", "You are terse.")]
    if earlier:
        messages += [Message("user", earlier), Message("assistant", "noted")]
    messages.append(Message("user", text))
    return ModelRequest("scripted", tuple(messages), output_schema=schema)


async def test_a_message_is_wrapped_with_deterministic_usage() -> None:
    model = ScriptedProvider(lambda request: Message("assistant", "ok", (ToolCall("c1", "t", {"x": 1}),)))
    request = ModelRequest(
        "anything", (Message("system", "You are terse."), Message("user", "hello")), tools=(TOOL,)
    )

    first = await model.request(request)
    again = await model.request(request)

    # input: 14 + 5 characters of content + 46 of the tool schema as compact JSON -> ceil(65 / 4)
    # output: 2 characters of content + 42 of the tool call as compact JSON -> ceil(44 / 4)
    assert first.usage == Usage(input_tokens=17, output_tokens=11, cached_input_tokens=0)
    assert again == first
    assert (first.model, first.provider, first.finish_reason) == ("scripted", "scripted", "tool_calls")
    assert first.message.tool_calls == (ToolCall("c1", "t", {"x": 1}),)
    assert list(model.requests) == [request, request]
    assert isinstance(model, ModelProvider)


async def test_only_the_latest_requests_are_kept() -> None:
    model = ScriptedProvider(lambda request: Message("assistant", request.model), keep_requests=2)
    for name in ("a", "b", "c"):
        await model.request(ModelRequest(name, (Message("user", "hi"),)))
    assert [r.model for r in model.requests] == ["b", "c"], "a long-running worker keeps no more"


async def test_a_whole_response_is_returned_as_is_and_async_scripts_work() -> None:
    canned = ModelResponse(Message("assistant", "hi"), Usage(1, 2, 3), "gpt-4o", "fake")

    async def respond(request: ModelRequest) -> ModelResponse:
        return canned

    assert await ScriptedProvider(respond).request(ask("x")) is canned


async def test_replies_come_in_order_then_run_out() -> None:
    model = ScriptedProvider.from_replies(["one", Message("assistant", "two")], name="demo")

    assert (await model.request(ask("a"))).message.content == "one"
    second = await model.request(ask("b"))
    assert (second.message.content, second.provider) == ("two", "demo")
    with pytest.raises(ModelError) as caught:
        await model.request(ask("c"))
    assert (caught.value.code, caught.value.retryable) == ("model_bad_output", False)


async def test_the_first_matching_rule_answers() -> None:
    refund = Message("assistant", "", (ToolCall("c1", "refund", {"amount": 5}),))
    model = ScriptedProvider.from_rules(
        [
            Rule("REFUND", refund),
            Rule(
                lambda r: len(r.messages) > 3, lambda r: Message("assistant", f"{len(r.messages)} messages")
            ),
            Rule("refund or cancel", Message("assistant", "never reached: the first rule matched")),
            Rule("you are terse", Message("assistant", "wrong: matched the system prompt")),
        ],
        fallback="no idea",
    )

    assert (await model.request(ask("Please refund or cancel my order"))).message == refund
    # A string matches the latest user message only, not earlier ones or the system prompt.
    assert (await model.request(ask("hello", earlier="refund please"))).message.content == "4 messages"
    assert (await model.request(ask("what now?"))).message.content == "no idea"


async def test_structured_requests_get_parsed_json() -> None:
    model = ScriptedProvider.from_replies(['{"start": true}', "not json"])
    schema = {"type": "object"}

    assert (await model.request(ask("go?", schema=schema))).structured == {"start": True}
    with pytest.raises(ModelError) as caught:
        await model.request(ask("go?", schema=schema))
    assert caught.value.code == "model_bad_output"


# --- provider_for ------------------------------------------------------------------------


def settings(**values: object) -> Settings:
    base: dict[str, object] = {
        "model": None,
        "openai_api_key": "sk-test",
        "anthropic_api_key": "sk-ant-test",
        "gemini_api_key": "gm-test",
        "model_timeout": 7.0,
        "model_max_retries": 1,
    }
    base.update(values)
    return Settings(**base)  # type: ignore[arg-type]


def test_no_model_anywhere_means_the_scripted_provider_announced_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(select_module, "_announced", False)
    mine = ScriptedProvider(lambda r: Message("assistant", "mine"))

    with caplog.at_level(logging.INFO, logger="agentflow.llm.select"):
        first = provider_for(None, settings(), scripted=mine)
        second = provider_for(None, settings(), scripted=mine)

    assert first == (mine, "scripted") and second == (mine, "scripted")
    notes = [r.getMessage() for r in caplog.records if "no model configured" in r.getMessage()]
    assert len(notes) == 1


async def test_scripted_references_and_the_default_echo() -> None:
    model, name = provider_for("scripted:triage-bot", settings())
    assert name == "triage-bot"
    reply = await model.request(ask("ping"))
    assert reply.message.content == "(scripted) ping"
    assert (await model.request(ask("ping", schema={"type": "object"}))).structured == {}


def test_vendor_references_build_their_provider() -> None:
    cases = {
        "openai:gpt-4o-mini": (OpenAIProvider, "gpt-4o-mini"),
        "anthropic:claude-sonnet-4-5": (AnthropicProvider, "claude-sonnet-4-5"),
        "gemini:gemini-2.0-flash": (GeminiProvider, "gemini-2.0-flash"),
        " OpenAI : gpt-4.1 ": (OpenAIProvider, "gpt-4.1"),
    }
    for ref, (kind, name) in cases.items():
        model, chosen = provider_for(ref, settings())
        assert isinstance(model, kind) and chosen == name, ref
        assert isinstance(model, ModelProvider)
        # Embeddings: OpenAI and Gemini only.
        assert isinstance(model, Embedder) == (kind is not AnthropicProvider), ref


def test_the_settings_model_is_the_default() -> None:
    model, name = provider_for(None, settings(model="anthropic:claude-haiku-4-5"))
    assert isinstance(model, AnthropicProvider) and name == "claude-haiku-4-5"


async def test_providers_sharing_a_client_are_built_once() -> None:
    async with httpx.AsyncClient() as client:
        first, _ = provider_for("gemini:gemini-2.0-flash", settings(), http_client=client)
        again, _ = provider_for("gemini:gemini-2.5-pro", settings(), http_client=client)
        other_key, _ = provider_for(
            "gemini:gemini-2.0-flash", settings(gemini_api_key="other"), http_client=client
        )
    assert again is first
    assert other_key is not first


def test_unknown_providers_and_missing_models_are_refused() -> None:
    with pytest.raises(ModelError) as caught:
        provider_for("mistral:large", settings())
    assert caught.value.code == "model_unknown"
    assert "openai, anthropic, gemini, scripted" in caught.value.message

    with pytest.raises(ModelError) as caught:
        provider_for("openai", settings())
    assert caught.value.code == "model_unknown"
    assert "openai:gpt-4o-mini" in caught.value.message


def test_a_vendor_without_a_key_is_auth_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    with pytest.raises(ModelError) as caught:
        provider_for("openai:gpt-4o", settings(openai_api_key=None))

    assert caught.value.code == "model_auth_missing"
