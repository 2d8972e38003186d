"""Putting a streamed chat completion back together: text deltas go to the sink as they come,
tool-call fragments are joined by index, and the end is the ``ChatCompletion`` a plain request
would have returned (with the usage the final chunk reports)."""

from __future__ import annotations

from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionChunk

from agentflow.llm.streaming import TextSink

FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})


class StreamedAnswer:
    """The pieces of one streamed answer, in arrival order."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.id = "streamed"
        self.created = 0
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None

    def add(self, chunk: ChatCompletionChunk, sink: TextSink) -> None:
        """Take one chunk (the first choice's delta), feeding its text to ``sink``."""
        self.id, self.created, self.model = (
            chunk.id or self.id,
            chunk.created or self.created,
            chunk.model or self.model,
        )
        if chunk.usage is not None:
            self.usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta.content:
                self.content.append(delta.content)
                sink.text(delta.content)
            if delta.refusal:
                self.refusal.append(delta.refusal)
            for part in delta.tool_calls or ():
                slot = self.calls.setdefault(part.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = part.id or slot["id"]
                if part.function is not None:
                    slot["name"] += part.function.name or ""
                    slot["arguments"] += part.function.arguments or ""
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason

    def completion(self) -> ChatCompletion:
        """The answer as a whole."""
        calls = [
            {"id": slot["id"] or f"call_{index}", "type": "function",
             "function": {"name": slot["name"], "arguments": slot["arguments"] or "{}"}}
            for index, slot in sorted(self.calls.items())
        ]  # fmt: skip
        finish = self.finish_reason if self.finish_reason in FINISH_REASONS else "stop"
        message = {
            "role": "assistant",
            "content": "".join(self.content) or None,
            "refusal": "".join(self.refusal) or None,
            "tool_calls": calls or None,
        }
        return ChatCompletion.model_validate(
            {
                "id": self.id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                "usage": self.usage,
            }
        )
