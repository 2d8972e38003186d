"""Read what a model wrote: tool-call arguments and structured (JSON) answers.

Model output is untrusted data. Malformed tool arguments never crash the adapter: they come
back as ``{"_unparsed": raw}``, which no tool schema accepts, so the agent loop's schema
validation rejects the call and can tell the model. A structured answer that is not JSON is
a ``model_bad_output`` error.
"""

from __future__ import annotations

import json
from typing import Any

from agentflow.core.chat import Usage
from agentflow.llm.base import ModelError

UNPARSED = "_unparsed"


def parse_tool_arguments(raw: str | dict[str, Any] | None) -> dict[str, Any]:
    """A tool call's arguments as a JSON object.

    Args:
        raw: the JSON text the vendor sent (OpenAI), or an already-decoded object.

    Returns:
        The object; ``{}`` for no arguments; ``{"_unparsed": raw}`` when ``raw`` is not a JSON object.
    """
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {UNPARSED: raw}
    return value if isinstance(value, dict) else {UNPARSED: raw}


class StructuredOutputError(ModelError):
    """A structured answer that is not JSON (code ``model_bad_output``).

    Attributes:
        text: what the model wrote.
        usage: the tokens the call used all the same.
    """

    def __init__(self, message: str, *, text: str, usage: Usage, details: dict[str, Any]) -> None:
        super().__init__("model_bad_output", message, details=details)
        self.text = text
        self.usage = usage


def parse_structured(
    text: str, provider: str, finish_reason: str | None = None, usage: Usage | None = None
) -> Any:
    """The JSON value of a structured answer.

    Args:
        text: what the model wrote.
        provider: the adapter's name, for the error.
        finish_reason: why the model stopped; a cut-off answer gets a clearer message.
        usage: the tokens the call used (kept on the error).

    Raises:
        StructuredOutputError: when ``text`` is not JSON.
    """
    try:
        return json.loads(text)
    except ValueError:
        pass
    truncated = finish_reason is not None and finish_reason.lower() in ("length", "max_tokens")
    hint = (
        "the answer was cut off: raise max_output_tokens"
        if truncated
        else "the model did not follow the output schema; retry, or use a model with structured output"
    )
    raise StructuredOutputError(
        f"{provider} returned a structured answer that is not valid JSON ({hint})",
        text=text,
        usage=usage or Usage(),
        details={"provider": provider, "output": text[:1000], "finish_reason": finish_reason},
    )
