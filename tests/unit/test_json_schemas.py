"""Checking documents against JSON Schemas: problems with their paths, validators kept."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator

import jsonschema
import jsonschema_rs
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_a_valid_document_is_answered_by_the_compiled_validator() -> None:
    schema = {**TASK, "properties": {**TASK["properties"], "n": {"type": "integer", "maximum": 9}}}
    kept = json_schemas._kept(schema, checked=False)
    assert kept is not None and kept.fast is not None

    class Unused:
        def iter_errors(self, _document: object) -> list[object]:
            raise AssertionError("the reference validator checked a valid document")

    reference, kept.validator = kept.validator, Unused()  # type: ignore[assignment]
    try:
        assert json_schemas.problems(schema, {"title": "Call back", "n": 3}) == []
    finally:
        kept.validator = reference
    # An invalid one still gets the reference validator's messages.
    assert json_schemas.problems(schema, {"title": "x", "n": 10}) == [
        "n: 10 is greater than the maximum of 9"
    ]


def test_where_the_compiled_validator_objects_the_reference_decides() -> None:
    # Its \d is ASCII; Python's (the reference's) is every decimal digit.
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^\\d+$"}}}
    assert jsonschema_rs.validator_for(schema).is_valid({"code": "١٢٣"}) is False
    assert json_schemas.problems(schema, {"code": "١٢٣"}) == []
    assert json_schemas.problems(schema, {"code": "12a"}) == ["code: '12a' does not match '^\\\\d+$'"]


def test_a_remote_reference_is_never_fetched() -> None:
    with _recording_server() as (url, requests):
        schema = {"type": "object", "properties": {"a": {"$ref": url}}}
        kept = json_schemas._kept(schema, checked=False)
        assert kept is not None and kept.fast is None  # not compiled: it would need the network
        assert json_schemas.problems(schema, "not an object") == [
            "(arguments): 'not an object' is not of type 'object'"
        ]
        assert requests == []


def test_a_document_that_is_not_json_is_checked_by_the_reference() -> None:
    schema = {"type": "object", "maxProperties": 1}
    assert json_schemas.problems(schema, {1: "a"}) == []
    assert json_schemas.problems(schema, {1: "a", 2: "b"}) == [
        "(arguments): {1: 'a', 2: 'b'} has too many properties"
    ]


_SCHEMAS = [
    TASK,
    {"type": "array", "items": {"type": "integer", "minimum": -5, "multipleOf": 2}, "maxItems": 4},
    {
        "anyOf": [
            {"type": "string", "minLength": 2, "pattern": "^[a-z]+$"},
            {"type": "number", "exclusiveMaximum": 3},
        ]
    },
    {
        "type": "object",
        "properties": {"when": {"type": "string", "format": "date-time"}, "tags": {"uniqueItems": True}},
        "patternProperties": {"^x-": {"type": "boolean"}},
        "additionalProperties": {"type": ["null", "string"]},
        "dependentRequired": {"when": ["tags"]},
    },
    {"$defs": {"leaf": {"const": {"k": [1, 2]}}}, "oneOf": [{"$ref": "#/$defs/leaf"}, {"enum": [None, 0.5]}]},
]
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-10, 10)
    | st.floats(-10, 10, allow_nan=False)
    | st.sampled_from(["", "ab", "AB", "x-1", "2026-12-06T10:00:00Z", "title", "low"]),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(
            st.sampled_from(["title", "priority", "when", "tags", "x-a", "k", "extra"]), inner, max_size=5
        )
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(schema=st.sampled_from(_SCHEMAS), document=_JSON)
def test_the_answer_is_the_reference_validators(schema: dict[str, object], document: object) -> None:
    reference = sorted(
        json_schemas.validator_for(schema).iter_errors(document),  # type: ignore[union-attr]
        key=lambda e: list(e.absolute_path),
    )
    found = json_schemas.problems(schema, document)
    assert (found == []) == (reference == [])
    assert len(found) == min(len(reference), json_schemas.MAX_PROBLEMS)


@contextlib.contextmanager
def _recording_server() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on localhost that records every request and serves a schema."""
    requests: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requests.append(self.path)
            body = b'{"type": "object"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/schema.json", requests
    finally:
        server.shutdown()
        server.server_close()
