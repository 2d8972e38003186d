"""Pick the provider for a model reference such as ``openai:gpt-4o-mini``."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable

import httpx

from agentflow.core.chat import Message, ModelRequest
from agentflow.llm.base import ModelError, ModelProvider
from agentflow.llm.credentials import reveal_key
from agentflow.llm.scripted import ScriptedProvider, latest_user_text
from agentflow.settings import Settings

log = logging.getLogger(__name__)

KNOWN_PROVIDERS = ("openai", "anthropic", "gemini", "scripted")
SCRIPTED = "scripted"

_Factory = Callable[[Settings, httpx.AsyncClient | None], ModelProvider]


# The SDKs are imported when a provider is first built: importing all three costs seconds.
def _openai(s: Settings, http: httpx.AsyncClient | None) -> ModelProvider:
    from agentflow.llm.openai import OpenAIProvider

    return OpenAIProvider(
        s.openai_api_key, base_url=s.openai_base_url, timeout=s.model_timeout,
        max_retries=s.model_max_retries, http_client=http,
    )  # fmt: skip


def _anthropic(s: Settings, http: httpx.AsyncClient | None) -> ModelProvider:
    from agentflow.llm.anthropic import AnthropicProvider

    return AnthropicProvider(
        s.anthropic_api_key, base_url=s.anthropic_base_url, timeout=s.model_timeout,
        max_retries=s.model_max_retries, http_client=http,
    )  # fmt: skip


def _gemini(s: Settings, http: httpx.AsyncClient | None) -> ModelProvider:
    from agentflow.llm.gemini import GeminiProvider

    return GeminiProvider(
        s.gemini_api_key, base_url=s.gemini_base_url, timeout=s.model_timeout,
        max_retries=s.model_max_retries, http_client=http,
    )  # fmt: skip


_FACTORIES: dict[str, _Factory] = {"openai": _openai, "anthropic": _anthropic, "gemini": _gemini}

# Providers already built per HTTP client: building an SDK client costs tens of milliseconds
# (Gemini's about 100), too much for every agent decision. Only providers that send through a
# caller's client are kept, so nothing cached owns connections; the entries go with the client.
_built: weakref.WeakKeyDictionary[httpx.AsyncClient, dict[tuple[object, ...], ModelProvider]] = (
    weakref.WeakKeyDictionary()
)
_announced = False


def provider_for(
    ref: str | None,
    settings: Settings,
    http_client: httpx.AsyncClient | None = None,
    scripted: ScriptedProvider | None = None,
) -> tuple[ModelProvider, str]:
    """The provider and model name for ``ref`` (``provider:model``).

    Args:
        ref: ``openai:gpt-4o-mini``, ``anthropic:claude-sonnet-4-5``, ``gemini:gemini-2.0-flash``,
            ``scripted`` or ``scripted:<anything>``; None means ``settings.model``, and when
            that is unset too, the scripted provider.
        settings: keys, base URLs, timeout and retries of the vendors.
        http_client: the client every vendor call goes through (the engine's guarded one).
        scripted: the scripted provider to use for ``scripted`` (default: one that echoes).

    Returns:
        The provider, and the model name to put in ``ModelRequest.model``.

    Raises:
        ModelError: ``model_unknown`` for an unknown provider or a reference without a model;
            ``model_auth_missing`` when the vendor has no key.
    """
    chosen = (ref if ref is not None else settings.model) or ""
    chosen = chosen.strip()
    if not chosen:
        _announce_scripted()
        return scripted or ScriptedProvider(echo), SCRIPTED
    prefix, _, model = chosen.partition(":")
    prefix = prefix.strip().lower()
    model = model.strip()
    if prefix == SCRIPTED:
        return scripted or ScriptedProvider(echo), model or SCRIPTED
    factory = _FACTORIES.get(prefix)
    if factory is None:
        raise ModelError(
            "model_unknown",
            f"unknown model provider {prefix!r} in {chosen!r}: write provider:model with one of "
            f"{', '.join(KNOWN_PROVIDERS)} (e.g. openai:gpt-4o-mini)",
            retryable=False,
            details={"model": chosen, "known": list(KNOWN_PROVIDERS)},
        )
    if not model:
        raise ModelError(
            "model_unknown",
            f"the model reference {chosen!r} names no model: write {prefix}:<model>, e.g. "
            f"{_EXAMPLES[prefix]}",
            retryable=False,
            details={"model": chosen, "known": list(KNOWN_PROVIDERS)},
        )
    if http_client is None:
        return factory(settings, None), model
    key = _cache_key(prefix, settings)
    built = _built.setdefault(http_client, {})
    provider = built.get(key)
    if provider is None:
        provider = built[key] = factory(settings, http_client)
    return provider, model


_EXAMPLES = {
    "openai": "openai:gpt-4o-mini",
    "anthropic": "anthropic:claude-sonnet-4-5",
    "gemini": "gemini:gemini-2.0-flash",
}


def _cache_key(prefix: str, settings: Settings) -> tuple[object, ...]:
    # Everything a factory reads, so changed settings build a new provider.
    key = reveal_key(getattr(settings, f"{prefix}_api_key"))
    base_url = getattr(settings, f"{prefix}_base_url")
    return (prefix, key, base_url, settings.model_timeout, settings.model_max_retries)


def _announce_scripted() -> None:
    global _announced
    if not _announced:
        _announced = True
        log.info(
            "no model configured: using the scripted provider (set AGENTFLOW_MODEL, e.g. openai:gpt-4o-mini)"
        )


def echo(request: ModelRequest) -> Message:
    """The default scripted behaviour: answer with the latest user message (``{}`` when JSON is asked)."""
    if request.output_schema is not None:
        return Message("assistant", "{}")
    return Message("assistant", f"(scripted) {latest_user_text(request)}".rstrip())
