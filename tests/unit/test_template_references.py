"""What a template reads from a name, and whether a JSON Schema allows a path."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.core.graph.schema_paths import can_have, keys_of
from agentflow.core.payload_format import with_nested_keys
from agentflow.core.templating.references import read_paths, template_reads


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        ("no template at all: input.x", []),
        ("{{ input.customer.email }}", [("customer", "email")]),
        ("{{ input['a b'][0].c }}", [("a b", 0, "c")]),
        ("{{ input }}", [()]),
        ("{{ input[key].x }}", [()]),  # a dynamic key ends the path where it starts
        ("{{ input.get('x') }}", [()]),  # a method call is not a key
        ("{{ input.items.count }} and {{ input.n | default(1) }}", [("items", "count"), ("n",)]),
        ("{% for row in input.rows %}{{ row.x }}{% endfor %}", [("rows",)]),
        ("{{ payload.input.x }} {{ steps.input }}", []),  # another name's field called input
        ("{% set input = 1 %}{{ input }}", [()]),
        ("{{ input. }}", []),  # does not parse: compiling reports it
        ("{{ input[True] }}", [()]),
    ],
)
def test_read_paths(text: str, paths: list[tuple[Any, ...]]) -> None:
    assert read_paths(text, "input") == paths


def test_template_reads_walks_lists_and_dicts_with_their_config_paths() -> None:
    value = {"to": "{{ input.email }}", "cc": ["x", "{{ input.team[1] }}"], "n": 3}
    assert template_reads(value, "input", "nodes[2].args") == [
        ("nodes[2].args.to", ("email",)),
        ("nodes[2].args.cc[1]", ("team", 1)),
    ]


CLOSED = {
    "type": "object",
    "properties": {
        "a": {"type": "object", "properties": {"b": {"type": "string"}}},
        "n": {"type": "integer"},
    },
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("schema", "path", "expected"),
    [
        ({}, ("anything", 3, "x"), True),
        (CLOSED, (), True),
        (CLOSED, ("a",), True),
        (CLOSED, ("a", "b"), True),
        (CLOSED, ("a", "zzz"), True),  # "a" does not close its own properties
        (CLOSED, ("zzz",), False),
        (CLOSED, ("n", "x"), False),  # an integer has no fields
        (CLOSED, ("a", "b", "c"), False),
        ({"type": "array", "items": CLOSED}, (0, "a"), True),
        ({"type": "array", "items": CLOSED}, ("0", "zzz"), False),
        ({"type": "array"}, ("name",), False),
        (
            {"anyOf": [CLOSED, {"type": "object", "properties": {"q": {}}, "additionalProperties": False}]},
            ("q",),
            True,
        ),
        ({"anyOf": [CLOSED, {"type": "null"}]}, ("q",), False),
        ({"type": "object", "additionalProperties": {"type": "string"}}, ("k", "x"), False),
        ({"type": ["object", "null"], "properties": {"k": {}}}, ("k",), True),
    ],
)
def test_can_have(schema: dict[str, Any], path: tuple[Any, ...], expected: bool) -> None:
    assert can_have(schema, path) is expected


def test_keys_of_lists_every_branch_once() -> None:
    schema = {"anyOf": [CLOSED, {"properties": {"n": {}, "m": {}}}]}
    assert keys_of(schema) == ["a", "n", "m"]


def test_flat_dotted_keys_are_also_reachable_nested() -> None:
    payload = {"customer.email": "a@b.c", "customer.name": "Ann", "order": {"id": 7}, "order.total": 9}
    view = with_nested_keys(payload)
    assert view["customer"] == {"email": "a@b.c", "name": "Ann"}
    assert view["order"] == {"id": 7, "total": 9}
    assert view["customer.email"] == "a@b.c"
    assert payload == {
        "customer.email": "a@b.c",
        "customer.name": "Ann",
        "order": {"id": 7},
        "order.total": 9,
    }


def test_a_nested_value_already_there_wins_and_odd_keys_are_left_alone() -> None:
    payload = {"a": {"b": 1}, "a.b": 2, "x": 5, "x.y": 3, ".lead": 1, "trail.": 2}
    view = with_nested_keys(payload)
    assert view["a"] == {"b": 1} and view["x"] == 5
    assert set(view) == set(payload)
    assert with_nested_keys([1]) == [1] and with_nested_keys({"plain": 1}) == {"plain": 1}
