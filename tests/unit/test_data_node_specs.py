"""The data nodes' configs: each mistake refused at publish with its path."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.core.definitions import StructuredConfig, validate_config
from agentflow.core.errors import ConfigError
from agentflow.core.graph.data_nodes import MappingNode


def first_error(node: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        validate_config({"name": "d", "kind": "structured", "nodes": [node]})
    errors: list[dict[str, str]] = info.value.info.details["errors"]
    return errors[0]


@pytest.mark.parametrize(
    ("node", "path", "words"),
    [
        ({"id": "m", "type": "mapping"}, "nodes[0]", "exactly one of 'output' or 'expression'"),
        ({"id": "m", "type": "mapping", "output": {}, "expression": "a"}, "nodes[0]", "exactly one of"),
        (
            {"id": "m", "type": "mapping", "expression": "input.[["},
            "nodes[0].expression",
            "not a JMESPath expression",
        ),
        ({"id": "m", "type": "mapping", "output": {"a": "{{ input. }}"}}, "nodes[0].output.a", "template"),
        ({"id": "f", "type": "filter"}, "nodes[0].where", "Field required"),
        (
            {"id": "f", "type": "filter", "where": {"path": "item.x", "op": "nope"}},
            "nodes[0].where",
            "where.op",
        ),
        ({"id": "s", "type": "sort", "by": "a..b"}, "nodes[0].by", "invalid path"),
        ({"id": "s", "type": "sort", "order": "up"}, "nodes[0].order", "'asc' or 'desc'"),
    ],
)
def test_data_node_config_errors(node: dict[str, Any], path: str, words: str) -> None:
    error = first_error(node)
    assert error["path"] == path and words in error["message"], error


def test_a_mapping_output_declares_its_shape_and_an_expression_does_not() -> None:
    config = validate_config(
        {
            "name": "d",
            "kind": "structured",
            "nodes": [{"id": "m", "type": "mapping", "output": {"a": {"b": 1}, "c": "x"}}],
        }
    )
    assert isinstance(config, StructuredConfig)
    node = config.node("m")
    assert node.output_schema("result") == {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"b": {}}, "additionalProperties": False},
            "c": {},
        },
        "additionalProperties": False,
    }
    assert node.output_schema("error")["required"] == ["code", "message"]
    searching = MappingNode(id="m", expression="input.a")
    assert searching.output_schema("result") == {}
    assert searching.search({"input": {"a": [1]}}) == [1]
