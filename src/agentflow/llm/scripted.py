"""A deterministic model for tests, the demo and offline use: a function decides every answer.

No network, no randomness: the same requests get the same answers and the same usage, so
budgets, costs and step logs are reproducible. Three ways to script it:

* ``ScriptedProvider(respond)``: a function from the request to the reply;
* ``ScriptedProvider.from_replies([...])``: replies in order;
* ``ScriptedProvider.from_rules([Rule(...)], fallback)``: the first rule whose condition
  matches the request answers.

Example:
    >>> model = ScriptedProvider.from_rules(
    ...     [Rule("refund", Message("assistant", "", (ToolCall("c1", "refund", {"amount": 5}),)))],
    ...     fallback=Message("assistant", "Done."),
    ... )
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from agentflow.core.chat import Message, ModelRequest, ModelResponse
from agentflow.core.frozen import frozen
from agentflow.llm.base import ModelError
from agentflow.llm.decoding import parse_structured
from agentflow.llm.streaming import TextSink
from agentflow.llm.usage_estimate import estimate_usage

__all__ = ["SCRIPTED_MODEL", "Rule", "ScriptedProvider", "estimate_usage", "latest_user_text"]

Answer = Message | ModelResponse
Respond = Callable[[ModelRequest], Answer | Awaitable[Answer]]
ReplyFor = Message | Callable[[ModelRequest], Message]

SCRIPTED_MODEL = "scripted"
STREAM_CHUNK = re.compile(r"\s*\S+\s*|\s+")
"""The pieces a scripted answer streams in: a word with the spaces around it."""


@frozen
class Rule:
    """One scripted behaviour: when the request matches, answer with ``reply``.

    Attributes:
        when: a text that the latest user message contains (case-insensitive), or a predicate.
        reply: the answer, or a function of the request that makes it.
    """

    when: str | Callable[[ModelRequest], bool]
    reply: ReplyFor

    def matches(self, request: ModelRequest) -> bool:
        """Whether this rule answers ``request``."""
        if isinstance(self.when, str):
            return self.when.lower() in latest_user_text(request).lower()
        return bool(self.when(request))


class ScriptedProvider:
    """A model whose answers come from a function.

    Args:
        respond: makes the reply to a request: a ``Message`` (wrapped with deterministic usage)
            or a whole ``ModelResponse`` (returned as is); may be async.
        name: the provider name reported on responses.
        keep_requests: how many of the latest requests ``requests`` keeps: a worker that
            answers with the scripted model for days (no model configured) must not keep
            every request it was asked.

    Attributes:
        name: as given.
        requests: the latest requests received, oldest first (for tests to inspect).
    """

    def __init__(self, respond: Respond, name: str = "scripted", keep_requests: int = 1000) -> None:
        self._respond = respond
        self.name = name
        self.requests: deque[ModelRequest] = deque(maxlen=keep_requests)

    @classmethod
    def from_replies(cls, replies: Iterable[Answer | str], name: str = "scripted") -> ScriptedProvider:
        """Answer with ``replies`` in order (a string is an assistant message's text).

        A request after the last reply fails with ``model_bad_output`` (not retryable).
        """
        queue = [Message("assistant", r) if isinstance(r, str) else r for r in replies]
        total = len(queue)

        def next_reply(request: ModelRequest) -> Answer:
            if not queue:
                raise ModelError(
                    "model_bad_output",
                    f"the scripted model has no reply left (it had {total}); script more replies",
                    retryable=False,
                    details={"provider": name, "replies": total},
                )
            return queue.pop(0)

        return cls(next_reply, name)

    @classmethod
    def from_rules(
        cls,
        rules: Sequence[Rule],
        fallback: ReplyFor | str = "I have no scripted answer for that.",
        name: str = "scripted",
    ) -> ScriptedProvider:
        """Answer with the first rule that matches, else with ``fallback``."""
        default: ReplyFor = Message("assistant", fallback) if isinstance(fallback, str) else fallback
        chosen = tuple(rules)

        def by_rule(request: ModelRequest) -> Message:
            reply = next((rule.reply for rule in chosen if rule.matches(request)), default)
            return reply if isinstance(reply, Message) else reply(request)

        return cls(by_rule, name)

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Ask the script; wrap a ``Message`` with deterministic usage.

        Raises:
            ModelError: ``model_bad_output`` when a structured request gets text that is not
                JSON; whatever the script raises.
        """
        self.requests.append(request)
        answer = self._respond(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, ModelResponse):
            return answer
        structured: Any = None
        if request.output_schema is not None and not answer.tool_calls:
            structured = parse_structured(answer.content, self.name, usage=estimate_usage(request, answer))
        return ModelResponse(
            message=answer,
            usage=estimate_usage(request, answer),
            model=SCRIPTED_MODEL,
            provider=self.name,
            structured=structured,
            finish_reason="tool_calls" if answer.tool_calls else "stop",
        )

    async def stream(self, request: ModelRequest, sink: TextSink) -> ModelResponse:
        """As ``request``, feeding the answer's text to ``sink`` a few words at a time (as a
        model writing it would)."""
        sink.restart()
        response = await self.request(request)
        for chunk in STREAM_CHUNK.findall(response.message.content):
            sink.text(chunk)
            await asyncio.sleep(0)
        return response


def latest_user_text(request: ModelRequest) -> str:
    """The content of the last user message ("" when there is none)."""
    return next((m.content for m in reversed(request.messages) if m.role == "user"), "")
