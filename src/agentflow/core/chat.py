"""Provider-neutral model messages: what the agent loop sends a model and what comes back.

Every provider adapter (``agentflow.llm``) translates these to and from its vendor's wire
format, so the agent loop, the gate and the tests never see a vendor type. All values are
plain data: a model's tool call is parsed into a ``ToolCall`` and validated against the tool's
JSON Schema before anything runs; nothing a model returns is ever evaluated.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, Literal

from agentflow.core.frozen import frozen

Role = Literal["system", "user", "assistant", "tool"]


@frozen
class ToolSchema:
    """A tool the model may call.

    Attributes:
        name: the tool's name (``^[a-zA-Z0-9_-]{1,64}$``, what every vendor accepts).
        description: what it does, for the model.
        parameters: a JSON Schema object describing its arguments.
    """

    name: str
    description: str
    parameters: dict[str, Any]


@frozen
class ToolCall:
    """One tool call a model asked for.

    Attributes:
        id: the vendor's call id (made up when the vendor has none), echoed in the result.
        name: the tool.
        arguments: the parsed arguments (a JSON object; ``{}`` when the model sent none).
    """

    id: str
    name: str
    arguments: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """A JSON document (for step logs and checkpoints)."""
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ToolCall:
        """The inverse of ``to_json``."""
        args = doc.get("arguments")
        return cls(str(doc.get("id", "")), str(doc.get("name", "")), args if isinstance(args, dict) else {})


@frozen
class Message:
    """One message of a conversation.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: the text (may be empty for an assistant message that only calls tools).
        tool_calls: for ``assistant`` messages, the calls the model asked for.
        tool_call_id: for ``tool`` messages, the call this is the result of.
        name: for ``tool`` messages, the tool's name (Gemini needs it).
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


@frozen
class Usage:
    """Tokens one or more calls used.

    ``input_tokens`` counts every prompt token, cached ones included; ``cached_input_tokens`` is
    the part served from the vendor's prompt cache (billed at the cached price).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


@frozen
class ModelRequest:
    """One request to a model.

    Attributes:
        model: the vendor's model name (``gpt-4o-mini``, ``claude-sonnet-4-5``, ...).
        messages: the conversation; a leading ``system`` message is the instructions.
        tools: the tools the model may call (empty: it can only answer).
        output_schema: ask for a JSON object matching this schema (structured output); the
            answer arrives parsed in ``ModelResponse.structured``.
        max_output_tokens: a cap on the answer's length.
        temperature: sampling temperature (None: the vendor's default).
        top_p: nucleus sampling mass (None: the vendor's default).
        stop: texts at which the model stops writing (empty: none).
    """

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...] = ()
    output_schema: dict[str, Any] | None = None
    max_output_tokens: int | None = 2048
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()


@frozen
class ModelResponse:
    """A model's answer.

    Attributes:
        message: the assistant message (text and/or tool calls).
        usage: tokens the call used.
        model: the model that answered (as the vendor reports it).
        provider: the adapter's name (``openai``, ``anthropic``, ``gemini``, ``scripted``).
        structured: the parsed JSON object when the request had an ``output_schema``.
        finish_reason: why the model stopped, as the vendor said it.
    """

    message: Message
    usage: Usage
    model: str
    provider: str
    structured: Any = None
    finish_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@frozen
class Spend:
    """What one step spent on a model: the model, its tokens, their USD cost, the calls made.

    Attributes:
        model: ``provider:model`` (or the provider alone when it names the model).
        usage: tokens of every call the step made.
        usd: their cost by the price table.
        calls: how many requests the step sent.
    """

    model: str
    usage: Usage
    usd: float
    calls: int = 1

    def __add__(self, other: Spend) -> Spend:
        return Spend(self.model, self.usage + other.usage, self.usd + other.usd, self.calls + other.calls)
