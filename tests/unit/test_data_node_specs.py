"""The data nodes' configs: each mistake refused at publish with its path."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ConfigError
from agentflow.core.graph.catalog import describe_kind
from agentflow.core.graph.data_nodes import MappingNode, SplitNode
from agentflow.core.graph.schema_paths import can_have


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
        ({"id": "p", "type": "split"}, "nodes[0]", "a split node needs exactly one of 'size', 'by' or 'separator'"),
        ({"id": "p", "type": "split", "size": 2, "by": "a"}, "nodes[0]", "exactly one of 'size', 'by' or 'separator'"),
        ({"id": "p", "type": "split", "by": "a", "separator": ","}, "nodes[0]", "exactly one of 'size', 'by'"),
        ({"id": "p", "type": "split", "size": 2, "separator": ","}, "nodes[0]", "exactly one of 'size', 'by'"),
        ({"id": "p", "type": "split", "size": 0}, "nodes[0].size", "greater than or equal to 1"),
        ({"id": "p", "type": "split", "size": 10_001}, "nodes[0].size", "less than or equal to 10000"),
        ({"id": "p", "type": "split", "size": "5"}, "nodes[0].size", "a valid integer"),
        ({"id": "p", "type": "split", "size": True}, "nodes[0].size", "a valid integer"),
        ({"id": "p", "type": "split", "by": "a..b"}, "nodes[0].by", "invalid path 'a..b'"),
        ({"id": "p", "type": "split", "separator": ""}, "nodes[0].separator", "at least 1 character"),
        ({"id": "p", "type": "split", "separator": "," * 101}, "nodes[0].separator", "at most 100 characters"),
        ({"id": "p", "type": "split", "size": 2, "items": "{{ input. }}"}, "nodes[0].items", "template"),
        ({"id": "p", "type": "split", "chunk": 2}, "nodes[0].chunk", "Extra inputs are not permitted"),
    ],
)  # fmt: skip
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
    assert node.port_schema("result") == {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"b": {}}, "additionalProperties": False},
            "c": {},
        },
        "additionalProperties": False,
    }
    assert node.port_schema("error")["required"] == ["code", "message"]
    searching = MappingNode(id="m", expression="input.a")
    assert searching.port_schema("result") == {}
    assert searching.search({"input": {"a": [1]}}) == [1]


def test_a_split_declares_the_shape_of_its_mode() -> None:
    chunks = SplitNode(id="p", size=2).port_schema("result")
    groups = SplitNode(id="p", by="tier").port_schema("result")
    parts = SplitNode(id="p", separator=",").port_schema("result")
    assert chunks["required"] == ["chunks", "count"] and chunks["additionalProperties"] is False
    assert chunks["properties"]["chunks"] == {"type": "array", "items": {"type": "array"}}
    assert groups["properties"]["groups"]["items"]["required"] == ["key", "items"]
    assert parts["properties"]["parts"] == {"type": "array", "items": {"type": "string"}}
    # What {{ input.x }} after each mode may read, as publishing judges it.
    assert can_have(chunks, ("chunks",)) and not can_have(chunks, ("groups",))
    assert can_have(groups, ("groups", 0, "key")) and not can_have(groups, ("groups", 0, "name"))
    assert can_have(parts, ("count",)) and not can_have(parts, ("parts", 0, "x"))
    assert SplitNode(id="p", size=2).port_schema("error")["required"] == ["code", "message"]


def test_the_split_kind_is_described_with_every_mode_it_has() -> None:
    described = describe_kind(SplitNode)
    assert described["kind"] == "split" and described["ports"] == ["result", "error"]
    assert [sorted(b["required"]) for b in described["output_schemas"]["result"]["anyOf"]] == [
        ["chunks", "count"],
        ["count", "groups"],
        ["count", "parts"],
    ]
    config = described["config_schema"]["properties"]
    assert config["size"]["anyOf"][0] == {"type": "integer", "minimum": 1, "maximum": 10_000}
    assert config["items"]["default"] == "{{ input }}"
