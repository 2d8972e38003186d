"""The token estimate's character count: orjson's output, counted as ``json.dumps`` would
write it (sorted keys, compact, non-ASCII escaped)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentflow.core.chat import Message, ModelRequest, ToolSchema
from agentflow.llm import usage_estimate
from agentflow.llm.usage_estimate import compact_length


def _written(doc: Any) -> int:
    return len(json.dumps(doc, sort_keys=True, separators=(",", ":")))


@pytest.mark.parametrize(
    "doc",
    [
        {"b": 1, "a": [1, 2.5, None, True, False]},
        {"name": "create_task", "parameters": {"type": "object", "required": ["title"]}},
        {"accents": "héllo wörld", "cjk": "中文", "nested": {"z": {"y": "ünï"}}},
        {"astral": "😀 and 𝄞"},
        {"controls": "tab\tnew\nline nul\x00 bell\x07 del\x7f"},
        {"quotes": 'say "hi" \\ back / slash', "separators": "\u2028\u2029"},
        {"big": 2**70, "small": -(2**70)},
        {2: "int keys", 1: "are written by json"},
        [],
        "a plain string",
        {"f": [0.1, 1e16, 123456.789, -0.0]},
    ],
)
def test_the_length_is_what_json_dumps_writes(doc: Any) -> None:
    assert compact_length(doc) == _written(doc)


def test_only_some_float_spellings_differ_and_by_a_character() -> None:
    for value in (1e-07, 5e-324, 1.5e-10):
        assert abs(compact_length({"f": value}) - _written({"f": value})) <= 1


def test_a_schema_is_counted_once_and_an_equal_new_one_on_its_own() -> None:
    tool = ToolSchema("lookup", "Find a record.", {"type": "object", "properties": {"q": {"type": "string"}}})
    request = ModelRequest(model="m", messages=(Message("user", "hi"),), tools=(tool,))
    first = usage_estimate.estimate_usage(request, Message("assistant", "ok"))
    counted: list[Any] = []
    real = usage_estimate.compact_length

    def counting(doc: Any) -> int:
        counted.append(doc)
        return real(doc)

    usage_estimate.compact_length = counting  # type: ignore[assignment]
    try:
        again = usage_estimate.estimate_usage(request, Message("assistant", "ok"))
        assert counted == [] and again == first  # the schema's length was kept
        wider = ToolSchema("lookup", "Find a record by name.", tool.parameters)
        bigger = usage_estimate.estimate_usage(
            ModelRequest(model="m", messages=request.messages, tools=(wider,)), Message("assistant", "ok")
        )
        assert len(counted) == 1 and bigger.input_tokens >= first.input_tokens
    finally:
        usage_estimate.compact_length = real  # type: ignore[assignment]
