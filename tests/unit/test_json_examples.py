"""The offline scripted model's structured answers: a value each schema accepts."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from agentflow.agent.gate import VERDICT_SCHEMA
from agentflow.agent.script import respond
from agentflow.core.chat import Message, ModelRequest, ToolSchema
from agentflow.core.json_examples import example_of

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"priority": {"type": "string", "enum": ["low", "high"]},
     "score": {"type": "integer", "minimum": 3}, "ratio": {"type": "number", "exclusiveMinimum": 0}},
     "required": ["priority", "score", "ratio"], "additionalProperties": False},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "minLength": 3},
     "minItems": 2}, "when": {"type": "string", "format": "date-time"}, "ok": {"type": "boolean"}}},
    {"type": "object", "properties": {"maybe": {"type": ["null", "string"]}, "pick": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
     "fixed": {"const": 7}, "who": {"type": "string", "format": "email"}, "nested": {"properties": {"a": {"type": "null"}}}}},
]  # fmt: skip


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_example_is_accepted_by_its_schema(schema: dict[str, Any]) -> None:
    value = example_of(schema)
    jsonschema.validate(value, schema)


def test_what_it_cannot_read_gives_none() -> None:
    assert example_of("not a schema") is None
    assert example_of({"type": "object", "properties": {"deep": {"$ref": "#/x"}}}) == {"deep": None}


def test_the_default_scripted_model_answers_each_kind_of_request() -> None:
    ask = (Message("system", "Be brief."), Message("user", "Summarise:   the  ticket"))
    plain = respond(ModelRequest("m", ask))
    assert plain.content == "(scripted answer) Summarise: the ticket" and not plain.tool_calls
    structured = respond(ModelRequest("m", ask, output_schema=SCHEMAS[0]))
    jsonschema.validate(json.loads(structured.content), SCHEMAS[0])
    gate = respond(ModelRequest("m", ask, output_schema=VERDICT_SCHEMA))
    assert "scripted gate" in gate.content
    agent = respond(ModelRequest("m", ask, tools=(ToolSchema("complete", "end", {"type": "object"}),)))
    assert [c.name for c in agent.tool_calls] == ["complete"]
