"""Streaming a model's answer while it is written (issue 12).

A caller that wants the text as it comes passes a ``TextSink``. A provider that can stream
(``StreamingProvider``: OpenAI and compatible servers, Anthropic, Gemini, the scripted model)
feeds it chunk by chunk; any other gets the whole text at once when the answer is in. Either way the call
returns the same ``ModelResponse`` as ``request``: streaming changes what a watcher sees, not
what the step records.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agentflow.core.chat import ModelRequest, ModelResponse
from agentflow.llm.base import ModelProvider


class TextSink(Protocol):
    """Where streamed text goes (``agentflow.store.run_deltas.DeltaWriter``)."""

    def restart(self) -> None:
        """The call starts again (a retry): what was streamed so far is void."""

    def text(self, chunk: str) -> None:
        """Text the model just wrote."""


@runtime_checkable
class StreamingProvider(Protocol):
    """A provider that can feed its answer's text to a sink while it is written."""

    async def stream(self, request: ModelRequest, sink: TextSink) -> ModelResponse:
        """Send ``request``, feeding ``sink`` as the answer comes; return the whole answer.

        Raises:
            ModelError: as ``request``.
        """
        ...


async def ask(provider: ModelProvider, request: ModelRequest, sink: TextSink | None) -> ModelResponse:
    """``provider``'s answer to ``request``, its text streamed to ``sink`` when one is given."""
    if sink is None:
        return await provider.request(request)
    if isinstance(provider, StreamingProvider):
        return await provider.stream(request, sink)
    response = await provider.request(request)
    sink.text(response.message.content)
    return response
