"""Pick the provider for a model reference such as ``openai:gpt-4o-mini``."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx

from agentflow.core.chat import Message, ModelRequest, ModelResponse
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
        s.openai_api_key, base_url=_base_url(s.openai_base_url), timeout=s.model_timeout,
        max_retries=s.model_max_retries, http_client=http,
    )  # fmt: skip


def _anthropic(s: Settings, http: httpx.AsyncClient | None) -> ModelProvider:
    from agentflow.llm.anthropic import AnthropicProvider

    return AnthropicProvider(
        s.anthropic_api_key, base_url=_base_url(s.anthropic_base_url), timeout=s.model_timeout,
        max_retries=s.model_max_retries, http_client=http,
    )  # fmt: skip


def _gemini(s: Settings, http: httpx.AsyncClient | None) -> ModelProvider:
    from agentflow.llm.gemini import GeminiProvider

    return GeminiProvider(
        s.gemini_api_key, base_url=_base_url(s.gemini_base_url), timeout=s.model_timeout,
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
            ``model_config_invalid`` for a base URL that is not an http(s) URL;
            ``model_auth_missing`` when the vendor has no key. None of them is retryable.
    """
    chosen = (ref if ref is not None else settings.model) or ""
    chosen = chosen.strip()
    # Where the reference came from, so the error says what to edit.
    origin = "the workflow's model" if ref is not None else "AGENTFLOW_MODEL"
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
            f"unknown model provider {prefix!r} in {origin} {chosen!r}: write provider:model with one "
            f"of {', '.join(KNOWN_PROVIDERS)} (e.g. openai:gpt-4o-mini)",
            retryable=False,
            details={"model": chosen, "known": list(KNOWN_PROVIDERS)},
        )
    if not model:
        raise ModelError(
            "model_unknown",
            f"{origin} {chosen!r} names no model: write {prefix}:<model>, e.g. {_EXAMPLES[prefix]}",
            retryable=False,
            details={"model": chosen, "known": list(KNOWN_PROVIDERS)},
        )
    _check_base_url(prefix, getattr(settings, f"{prefix}_base_url"))
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


def _base_url(value: str | None) -> str | None:
    """A base URL setting as the SDKs take it: a blank one (``VAR=`` in a .env file) is unset."""
    return value.strip() if value and value.strip() else None


def _check_base_url(prefix: str, value: str | None) -> None:
    # Caught here, where the setting is named: the SDKs accept anything and the request then
    # fails with a transport error that neither names the setting nor stops the retries.
    base_url = _base_url(value)
    if base_url is None:
        return
    parts = urlsplit(base_url)
    if parts.scheme in ("http", "https") and parts.hostname:
        return
    variable = f"AGENTFLOW_{prefix.upper()}_BASE_URL"
    raise ModelError(
        "model_config_invalid",
        f"{variable}={base_url!r} is not an http(s) URL: set it like http://localhost:11434/v1, "
        f"or unset it to use the {prefix} API itself.",
        retryable=False,
        details={"provider": prefix, "setting": variable, "base_url": base_url},
    )


def _cache_key(prefix: str, settings: Settings) -> tuple[object, ...]:
    # Everything a factory reads, so changed settings build a new provider.
    key = reveal_key(getattr(settings, f"{prefix}_api_key"))
    base_url = getattr(settings, f"{prefix}_base_url")
    return (prefix, key, base_url, settings.model_timeout, settings.model_max_retries)


class UnusableProvider:
    """A provider that fails every request with the configuration error that prevented building it.

    Agent steps resolve their model inside the step, so a missing key or an unknown provider
    must fail that step (once, not retryable, naming the setting to fix) rather than escape
    it as an unexpected worker error.

    Args:
        name: the provider named in the reference (``openai``, or the unknown prefix).
        error: why the provider could not be built.
    """

    def __init__(self, name: str, error: ModelError) -> None:
        self.name = name
        self.error = error

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Raise the configuration error (a fresh copy each time: callers add details)."""
        error = self.error
        raise ModelError(error.code, error.message, retryable=error.retryable, details=error.details)


def resolve_model(
    ref: str | None,
    settings: Settings,
    http_client: httpx.AsyncClient | None = None,
    scripted: ScriptedProvider | None = None,
) -> tuple[ModelProvider, str]:
    """Like ``provider_for``, but a configuration error becomes an ``UnusableProvider``.

    Returns:
        The provider and model name; when ``ref`` cannot be served, a provider whose every
        request raises the ``ModelError`` that says why.
    """
    try:
        return provider_for(ref, settings, http_client=http_client, scripted=scripted)
    except ModelError as exc:
        chosen = ((ref if ref is not None else settings.model) or "").strip()
        prefix, _, model = chosen.partition(":")
        return UnusableProvider(prefix.strip().lower() or "model", exc), model.strip() or chosen


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
