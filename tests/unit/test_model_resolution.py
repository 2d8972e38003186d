"""``resolve_model``: a model that cannot be built becomes a provider that fails each request with
the configuration error, naming what to set; ``provider_for`` itself still raises it."""

from __future__ import annotations

import pytest

from agentflow.core.chat import Message, ModelRequest
from agentflow.llm.base import ModelError
from agentflow.llm.openai import OpenAIProvider
from agentflow.llm.select import UnusableProvider, provider_for, resolve_model
from agentflow.settings import Settings

VENDOR_VARIABLES = {
    "openai": ("AGENTFLOW_OPENAI_API_KEY", "OPENAI_API_KEY"),
    "anthropic": ("AGENTFLOW_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY"),
    "gemini": ("AGENTFLOW_GEMINI_API_KEY", "GEMINI_API_KEY"),
}


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDKs read their own variables; none may come from the machine running the tests.
    for names in VENDOR_VARIABLES.values():
        for name in names:
            monkeypatch.delenv(name, raising=False)
    for name in ("GOOGLE_API_KEY", "ANTHROPIC_AUTH_TOKEN", "AGENTFLOW_MODEL"):
        monkeypatch.delenv(name, raising=False)


def _settings(**values: object) -> Settings:
    return Settings(**values)  # type: ignore[arg-type]


def _ask(model: str) -> ModelRequest:
    return ModelRequest(model, [Message("user", "hello")])


async def _error(ref: str | None, settings: Settings) -> ModelError:
    provider, model = resolve_model(ref, settings)
    assert isinstance(provider, UnusableProvider)
    with pytest.raises(ModelError) as caught:
        await provider.request(_ask(model))
    return caught.value


@pytest.mark.parametrize("vendor", sorted(VENDOR_VARIABLES))
async def test_a_vendor_without_a_key_fails_each_request_naming_the_variables(vendor: str) -> None:
    error = await _error(f"{vendor}:some-model", _settings())
    assert error.code == "model_auth_missing" and error.retryable is False
    assert all(name in error.message for name in VENDOR_VARIABLES[vendor]), error.message
    with pytest.raises(ModelError, match="model_auth_missing"):
        provider_for(f"{vendor}:some-model", _settings())


async def test_an_unknown_provider_names_where_it_came_from() -> None:
    from_workflow = await _error("mistral:large", _settings())
    assert (
        from_workflow.code == "model_unknown"
        and "the workflow's model 'mistral:large'" in from_workflow.message
    )
    from_settings = await _error(None, _settings(model="gpt-4o-mini"))
    assert from_settings.code == "model_unknown" and "AGENTFLOW_MODEL 'gpt-4o-mini'" in from_settings.message


@pytest.mark.parametrize("url", ["localhost:11434/v1", "ftp://models.example/v1", "http://"])
async def test_a_base_url_that_is_not_an_http_url_is_a_configuration_error(url: str) -> None:
    error = await _error("openai:gpt-4o-mini", _settings(openai_api_key="sk-test", openai_base_url=url))
    assert error.code == "model_config_invalid" and error.retryable is False
    assert "AGENTFLOW_OPENAI_BASE_URL" in error.message


async def test_each_request_gets_its_own_error() -> None:
    provider, model = resolve_model("openai:gpt-4o-mini", _settings())
    assert isinstance(provider, UnusableProvider)
    errors = []
    for _ in range(2):
        with pytest.raises(ModelError) as caught:
            await provider.request(_ask(model))
        caught.value.details["attempts"] = 1  # what the retry helper does to the error it raises
        errors.append(caught.value)
    assert errors[0] is not errors[1]
    assert "attempts" not in provider.error.details


def test_a_usable_model_resolves_as_before() -> None:
    provider, model = resolve_model("openai:gpt-4o-mini", _settings(openai_api_key="sk-test"))
    assert isinstance(provider, OpenAIProvider) and model == "gpt-4o-mini"
    with_base, _ = resolve_model(
        "openai:llama3",
        _settings(openai_base_url="http://localhost:11434/v1"),  # local servers need no key
    )
    assert isinstance(with_base, OpenAIProvider)
    blank, _ = resolve_model("openai:gpt-4o-mini", _settings(openai_api_key="sk-test", openai_base_url="  "))
    assert isinstance(blank, OpenAIProvider), "a blank base URL means the vendor's own API"
