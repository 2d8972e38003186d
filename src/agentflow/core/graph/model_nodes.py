"""Model nodes: a model's answer as a step of a graph (seed 001's LLM node, seed 002's ``llm``).

``llm`` sends one prompt (``system`` + ``prompt``, or a ``messages`` list, all templates) to
``model`` and sends the answer on: its ``text`` and, with ``output_schema``, its parsed and
validated ``data``, which later nodes can reference (``{{ input.data.x }}`` is checked at
publish against the schema).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentflow.core.graph.schema_paths import checked_object_schema
from agentflow.core.node_specs import NodeSpec, register_node_spec

MODEL_PATTERN = r"^[A-Za-z0-9_.:/@-]{1,200}$"
MAX_PROMPT = 100_000
MAX_MESSAGES = 50
MAX_STOP = 4

_USAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "input_tokens": {"type": "integer"},
        "output_tokens": {"type": "integer"},
        "cached_input_tokens": {"type": "integer"},
        "usd_cost": {"type": "number"},
        "calls": {"type": "integer"},
    },
    "additionalProperties": False,
}


class PromptMessage(BaseModel):
    """One message of an ``llm`` node's conversation; ``content`` is a template."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    role: Literal["system", "user", "assistant"]
    content: str = Field(max_length=MAX_PROMPT)


class LlmNode(NodeSpec):
    """Ask a model once: ``system`` and ``prompt`` (or ``messages``), rendered from the run's
    data; with ``output_schema`` the answer must be a JSON value that matches it (an invalid
    answer is sent back to the model with what is wrong, ``output_retries`` times, then the
    step fails with ``output_invalid``). Tokens and USD are recorded on the step and the run.
    """

    title: ClassVar[str] = "LLM"
    literal_fields: ClassVar[frozenset[str]] = frozenset({"output_schema"})
    type: Literal["llm"] = "llm"
    model: str | None = Field(
        default=None,
        pattern=MODEL_PATTERN,
        description="provider:model, e.g. openai:gpt-4o-mini (default: AGENTFLOW_MODEL, else scripted).",
    )
    system: str | None = Field(default=None, max_length=MAX_PROMPT, description="Instructions (a template).")
    prompt: str | None = Field(
        default=None, max_length=MAX_PROMPT, description="The user message (a template)."
    )
    messages: list[PromptMessage] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_MESSAGES,
        description="Or the whole conversation: [{role, content}], contents are templates.",
    )
    temperature: float | None = Field(default=None, ge=0, le=2, description="Sampling temperature.")
    top_p: float | None = Field(default=None, gt=0, le=1, description="Nucleus sampling mass.")
    max_tokens: int | None = Field(default=None, ge=1, le=200_000, description="Cap on the answer's tokens.")
    stop: list[str] = Field(
        default_factory=list, max_length=MAX_STOP, description="Texts at which the model stops."
    )
    output_schema: dict[str, Any] | None = Field(
        default=None, description="JSON Schema (type object) the answer must match; parsed into 'data'."
    )
    output_retries: int = Field(
        default=2, ge=0, le=5, description="Times an answer that breaks output_schema is sent back."
    )
    stream: bool = Field(
        default=False, description="Stream the answer's text to the run's stream while it is written."
    )

    @field_validator("output_schema")
    @classmethod
    def _schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # Every vendor's structured output wants an object at the top.
        return checked_object_schema(value, "output_schema", " (wrap a list in a property)")

    @field_validator("stop")
    @classmethod
    def _stop(cls, value: list[str]) -> list[str]:
        if any(not text or len(text) > 100 for text in value):
            raise ValueError("each stop text must have 1 to 100 characters")
        return value

    @model_validator(mode="after")
    def _one_of(self) -> LlmNode:
        if self.messages is None and self.prompt is None:
            raise ValueError("an llm node needs 'prompt' or 'messages'")
        if self.messages is not None and (self.prompt is not None or self.system is not None):
            raise ValueError("an llm node takes 'messages', or 'system' and 'prompt', not both")
        if self.messages is not None and all(m.role != "user" for m in self.messages):
            raise ValueError("an llm node's 'messages' need at least one 'user' message")
        return self

    def declared_schema(self, port: str) -> dict[str, Any]:
        """``text``, the model, the usage, and ``data`` shaped by ``output_schema`` when set."""
        properties: dict[str, Any] = {
            "text": {"type": "string"},
            "model": {"type": "string"},
            "finish_reason": {"type": ["string", "null"]},
            "usage": _USAGE_SCHEMA,
        }
        if self.output_schema is not None:
            properties["data"] = self.output_schema
        return {"type": "object", "properties": properties, "additionalProperties": False}


register_node_spec(LlmNode)
