"""Every model call a worker makes, timed on ``/metrics`` (``agentflow_model_call_duration_seconds``)
and, when traces are on, a ``chat {model}`` span (``runtime.tracing``).

The worker's providers are wrapped once, where they are resolved (``agent_setup``): agent
decisions, ``llm`` nodes, gates and memory summaries all go through them. The wrapper adds
nothing else: a provider that streams or embeds still does, one that does not still does not.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from agentflow.core.chat import ModelRequest, ModelResponse
from agentflow.llm.base import ModelProvider
from agentflow.runtime import metrics, tracing

_TIMED = ("request", "stream")


class TimedProvider:
    """``provider`` with each ``request`` (and ``stream``, when it has one) timed by model."""

    def __init__(self, provider: ModelProvider) -> None:
        self.inner = provider
        self.name = provider.name

    async def request(self, request: ModelRequest) -> ModelResponse:
        """The provider's answer, timed."""
        answer: ModelResponse = await _timed(self.name, request, self.inner.request, request)
        return answer

    def __getattr__(self, attribute: str) -> Any:
        value = getattr(self.inner, attribute)  # AttributeError when it has no such thing
        if attribute in _TIMED:

            async def timed(request: ModelRequest, *rest: Any) -> Any:
                return await _timed(self.name, request, value, request, *rest)

            return timed
        return value


def timed(provider: ModelProvider) -> ModelProvider:
    """``provider`` wrapped once (a wrapped one is returned as it is)."""
    return provider if isinstance(provider, TimedProvider) else TimedProvider(provider)


async def _timed(name: str, request: ModelRequest, call: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    model = request.model if request.model == name else f"{name}:{request.model}"
    began = time.perf_counter()
    outcome = "error"
    with tracing.model_span(name, request) as span:
        try:
            answer = await call(*args)
            outcome = "ok"
            tracing.record_answer(span, answer)
            return answer
        except Exception as exc:
            tracing.record_answer(span, None, exc)
            raise
        finally:
            metrics.labelled(metrics.MODEL_CALL_SECONDS, metrics.MODELS.of(model), outcome).observe(
                time.perf_counter() - began
            )
