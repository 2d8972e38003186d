"""Checking documents against JSON Schemas: problems with their paths, validators kept."""

from __future__ import annotations

import jsonschema

from agentflow.core import json_schemas

TASK = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "priority": {"enum": ["low", "high"]}},
    "required": ["title"],
    "additionalProperties": False,
}


def test_every_problem_is_listed_with_its_path_in_path_order() -> None:
    found = json_schemas.problems(TASK, {"priority": "urgent", "extra": 1})
    assert sorted(found[:2]) == [
        "(arguments): 'title' is a required property",
        "(arguments): Additional properties are not allowed ('extra' was unexpected)",
    ]
    assert found[2] == "priority: 'urgent' is not one of ['low', 'high']"
    assert json_schemas.problems(TASK, {"title": "Call back"}) == []


def test_nested_paths_and_the_name_of_the_whole_document() -> None:
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer"}}}}
    assert json_schemas.problems(schema, {"items": [1, "two"]}) == ["items.1: 'two' is not of type 'integer'"]
    assert json_schemas.problems(schema, [], whole="(answer)") == ["(answer): [] is not of type 'object'"]


def test_at_most_twenty_problems() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    assert len(json_schemas.problems(schema, ["x"] * 50)) == json_schemas.MAX_PROBLEMS == 20


def test_a_validator_is_built_once_per_schema_whatever_its_key_order() -> None:
    first = json_schemas.validator_for({"type": "object", "required": ["a"]})
    again = json_schemas.validator_for({"required": ["a"], "type": "object"})
    other = json_schemas.validator_for({"type": "object", "required": ["b"]})
    assert first is again
    assert other is not first


def test_the_schema_names_its_draft() -> None:
    old = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"}
    assert isinstance(json_schemas.validator_for(old), jsonschema.Draft7Validator)
    assert isinstance(json_schemas.validator_for({"type": "string"}), jsonschema.Draft202012Validator)


def test_a_broken_schema_is_no_validator_when_checked() -> None:
    broken = {"type": "no-such-type"}
    assert json_schemas.validator_for(broken, checked=True) is None
    assert json_schemas.problems(broken, {"a": 1}, checked=True) == []
    assert json_schemas.validator_for(TASK, checked=True) is json_schemas.validator_for(TASK)


def test_the_kept_validators_stay_bounded() -> None:
    for n in range(json_schemas._KEPT + 10):
        json_schemas.validator_for({"type": "object", "maxProperties": n})
    assert len(json_schemas._VALIDATORS) <= json_schemas._KEPT


def test_a_schema_that_is_not_json_is_checked_without_being_kept() -> None:
    kept = len(json_schemas._VALIDATORS)
    schema = {"type": "object", "properties": {"a": {"const": object()}}}
    assert json_schemas.validator_for(schema) is not json_schemas.validator_for(schema)
    assert len(json_schemas._VALIDATORS) == kept
