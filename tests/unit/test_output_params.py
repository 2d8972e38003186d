"""output_params: a node's declared output, shaped and coerced, and checked downstream."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ConfigError, StepFailure
from agentflow.core.graph.output_params import OutputParam, params_schema, shape_output

PARAMS = {
    "owner": OutputParam(type="string"),
    "score": OutputParam(type="number", default=0),
    "count": OutputParam(type="integer"),
    "vip": OutputParam(type="boolean", default=False),
    "tags": OutputParam(type="array", default=[]),
    "extra": OutputParam(),
}


def test_only_declared_keys_are_kept_coerced_with_defaults() -> None:
    shaped = shape_output(
        "n",
        PARAMS,
        {"owner": 42, "score": "4.5", "count": "7", "vip": "TRUE", "extra": {"a": 1}, "secret": "x"},
    )
    assert shaped == {"owner": "42", "score": 4.5, "count": 7, "vip": True, "tags": [], "extra": {"a": 1}}
    assert shape_output("n", PARAMS, {}) == {
        "owner": None, "score": 0, "count": None, "vip": False, "tags": [], "extra": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("string", True, "true"),
        ("string", 1.5, "1.5"),
        ("number", 3, 3),
        ("number", "1e3", 1000.0),
        ("integer", 4.0, 4),
        ("integer", "12", 12),
        ("boolean", 0, False),
        ("boolean", "1", True),
        ("object", {"a": 1}, {"a": 1}),
    ],
)
def test_coercions(kind: Any, value: Any, expected: Any) -> None:
    assert shape_output("n", {"v": OutputParam(type=kind)}, {"v": value}) == {"v": expected}


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("string", ["x"]),
        ("number", "twelve"),
        ("number", True),
        ("number", "nan"),
        ("integer", 4.5),
        ("boolean", "yes"),
        ("boolean", 2),
        ("array", "a,b"),
        ("object", [1]),
    ],
)
def test_what_cannot_be_coerced_fails_naming_the_node_and_parameter(kind: Any, value: Any) -> None:
    with pytest.raises(StepFailure) as info:
        shape_output("lookup", {"v": OutputParam(type=kind)}, {"v": value})
    assert info.value.info.code == "output_invalid" and not info.value.retryable
    assert info.value.info.message.startswith(f"node 'lookup' output parameter 'v' must be {kind}, not ")


def test_an_output_that_is_not_an_object_fails() -> None:
    with pytest.raises(StepFailure, match=r"node 'n' output must be an object, not list"):
        shape_output("n", PARAMS, [1, 2])


def test_declared_params_are_the_output_schema_checked_downstream() -> None:
    assert params_schema({"a": OutputParam(type="string"), "b": OutputParam()}) == {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {}},
        "additionalProperties": False,
    }
    base = {
        "name": "p",
        "kind": "structured",
        "nodes": [
            {"id": "lookup", "type": "tool", "tool": "crm", "output_params": {"owner": {"type": "string"}}},
            {"id": "end", "type": "finish", "output": "{{ input.owner }}"},
        ],
    }
    assert isinstance(validate_config(base), StructuredConfig)
    base["nodes"][1]["output"] = "{{ input.owner_email }}"
    with pytest.raises(ConfigError) as info:
        validate_config(base)
    assert "direct predecessor 'lookup' (tool) cannot produce it" in info.value.info.message
    assert "it sends owner" in info.value.info.message


def test_a_bad_declaration_is_refused_at_publish() -> None:
    config = {
        "name": "p",
        "kind": "structured",
        "nodes": [{"id": "t", "type": "tool", "tool": "crm", "output_params": {"x": {"type": "date"}}}],
    }
    with pytest.raises(ConfigError) as info:
        validate_config(config)
    assert info.value.info.details["errors"][0]["path"] == "nodes[0].output_params.x.type"
