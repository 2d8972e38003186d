"""``state_definition``, a run's starting state, ``save_to_state`` and ``{{ state.x }}``."""

from typing import Any

import pytest

from agentflow.core import planner
from agentflow.core.config_validation import config_document, validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ConfigError, StepFailure
from agentflow.core.state_definition import MAX_STATE_BYTES, check_start_state, start_errors
from agentflow.core.step_results import NodeResult
from agentflow.core.templating import render

DEFINITION = {
    "name": {"type": "string", "description": "who"},
    "count": "number",
    "vip": {"type": "boolean", "default": False},
    "profile": {"type": "object", "default": {"tier": "gold"}},
    "tags": {"type": "array", "default": ["a"]},
}


def config(definition: Any = DEFINITION, *nodes: dict[str, Any]) -> StructuredConfig:
    c = validate_config(
        {
            "name": "s",
            "kind": "structured",
            **({} if definition is None else {"state_definition": definition}),
            "nodes": list(nodes) or [{"id": "a", "type": "finish"}],
        }
    )
    assert isinstance(c, StructuredConfig)
    return c


def config_errors(**fields: Any) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        validate_config(
            {"name": "s", "kind": "structured", "nodes": [{"id": "a", "type": "finish"}], **fields}
        )
    assert info.value.code == "config_invalid"
    return {e["path"]: e["message"] for e in info.value.info.details["errors"]}


def errors(given: Any, definition: Any = DEFINITION) -> dict[str, str]:
    c = config(definition)
    return {e["path"]: e["message"] for e in start_errors(c.state_definition, given)}


# Publishing ---------------------------------------------------------------------------------


def test_canonical_and_legacy_shapes_normalise_to_one_document() -> None:
    c = config()
    assert c.state_definition is not None
    assert [(n, v.type, v.default) for n, v in c.state_definition.items()] == [
        ("name", "string", None),
        ("count", "number", None),
        ("vip", "boolean", False),
        ("profile", "object", {"tier": "gold"}),
        ("tags", "array", ["a"]),
    ]
    doc = config_document(c)["state_definition"]
    assert doc["count"] == {"type": "number"}, "the legacy shape is stored canonically"
    assert doc["name"] == {"type": "string", "description": "who"}
    assert doc["vip"] == {"type": "boolean", "default": False}


def test_a_config_without_state_keeps_its_document() -> None:
    doc = config_document(config(None))
    assert "state_definition" not in doc and "save_to_state" not in doc["nodes"][0]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"type": "string", "default": 5}, "the default must be a string, not a number"),
        ({"type": "number", "default": "5"}, "the default must be a number, not a string"),
        ({"type": "number", "default": True}, "the default must be a number, not a boolean"),
        ({"type": "number", "default": float("nan")}, "must be a finite number"),
        ({"type": "boolean", "default": "yes"}, "the default must be true or false"),
        ({"type": "object", "default": [1]}, "the default must be an object, not a list"),
        ({"type": "array", "default": {"a": 1}}, "the default must be an array, not an object"),
        ({"type": "string", "default": "a\x00b"}, "NUL character"),
        (
            {"type": "array", "default": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},
            "nested deeper",
        ),
        ({"type": "number", "default": 2**70}, "beyond 64 bits"),
        ({"type": "date"}, "Input should be"),
        ({"type": "string", "required": True}, "Extra inputs are not permitted"),
    ],
)
def test_bad_variables_are_refused_with_their_path(spec: dict[str, Any], fragment: str) -> None:
    found = config_errors(state_definition={"x": spec})
    assert len(found) == 1
    path, message = next(iter(found.items()))
    assert path.startswith("state_definition.x") and fragment in message, found


def test_bad_names_too_many_variables_and_oversized_defaults_are_refused() -> None:
    assert "bad-name" in config_errors(state_definition={"bad-name": "string"})["state_definition"]
    assert "state_definition" in config_errors(state_definition={f"v{i}": "string" for i in range(101)})
    big = {"a": {"type": "string", "default": "x" * 40_000}, "b": {"type": "string", "default": "y" * 40_000}}
    assert f"over the {MAX_STATE_BYTES}" in config_errors(state_definition=big)["state_definition"]
    assert config_errors(state_definition=["x"]) == {"state_definition": "Input should be a valid dictionary"}


def test_save_to_state_names_must_be_declared() -> None:
    nodes = [{"id": "a", "type": "finish", "save_to_state": {"count": "1", "nope": "2"}}]
    found = config_errors(state_definition={"count": "number"}, nodes=nodes)
    assert found == {"nodes[0].save_to_state.nope": "'nope' is not declared in state_definition"}
    found = config_errors(nodes=nodes)
    assert set(found) == {"nodes[0].save_to_state.count", "nodes[0].save_to_state.nope"}
    assert "no state_definition" in found["nodes[0].save_to_state.count"]


# Starting a run -----------------------------------------------------------------------------


def test_good_states_pass_and_missing_variables_take_defaults_or_null() -> None:
    given = {"name": "Ada", "count": 2.5, "vip": True, "profile": {}, "tags": [1, "b"]}
    assert errors(given) == {}
    assert errors({}) == {} and errors(None) == {}
    assert errors({"name": None}) == {}, "null means unset, for any type"
    c = config()
    assert planner.initial_state(c, {"count": 3}) == {
        "node": "a",
        "vars": {"name": None, "count": 3, "vip": False, "profile": {"tier": "gold"}, "tags": ["a"]},
    }
    assert planner.initial_state(c) == planner.initial_state(c, {}), "events and schedules get the defaults"


def test_defaults_are_copied_into_each_run() -> None:
    c = config()
    first = planner.initial_state(c)
    first["vars"]["tags"].append("changed")
    first["vars"]["profile"]["tier"] = "changed"
    assert planner.initial_state(c)["vars"]["tags"] == ["a"]
    assert planner.initial_state(c)["vars"]["profile"] == {"tier": "gold"}


def test_without_a_definition_the_state_is_only_the_cursor() -> None:
    c = config(None)
    assert planner.initial_state(c) == {"node": "a"}
    assert planner.variables({"node": "a"}) == {}
    assert errors({}, None) == {} and errors(None, None) == {}
    assert errors({"x": 1, "y": 2}, None) == {
        "state.x": "not declared: the workflow has no state_definition",
        "state.y": "not declared: the workflow has no state_definition",
    }


@pytest.mark.parametrize(
    ("given", "path", "fragment"),
    [
        ({"name": 5}, "state.name", "must be a string, not a number"),
        ({"count": "3"}, "state.count", "must be a number, not a string"),
        ({"count": True}, "state.count", "must be a number, not a boolean"),
        ({"count": float("inf")}, "state.count", "finite number"),
        ({"count": 2**64}, "state.count", "beyond 64 bits"),
        ({"vip": "yes"}, "state.vip", "must be true or false"),
        ({"profile": "x"}, "state.profile", "must be an object, not a string"),
        ({"profile": {"k": float("nan")}}, "state.profile", "NaN"),
        ({"profile": {"a\x00": 1}}, "state.profile", "NUL"),
        ({"tags": "a,b"}, "state.tags", "must be an array, not a string"),
        ({"tags": [{1: 2}]}, "state.tags", "key that is not a string"),
        ({"tags": [object()]}, "state.tags", "not JSON"),
        ({"name": "a\x00b"}, "state.name", "NUL character"),
        ({"name": "\ud800"}, "state.name", "surrogate"),
        ({"nmae": "Ada"}, "state.nmae", "not declared in state_definition (declared: count, name,"),
        ({"name": "x" * (MAX_STATE_BYTES + 1)}, "state", f"over the {MAX_STATE_BYTES} allowed"),
    ],
)
def test_each_problem_has_its_path(given: dict[str, Any], path: str, fragment: str) -> None:
    found = errors(given)
    assert list(found) == [path] and fragment in found[path], found


def test_every_field_is_listed_and_the_error_is_state_invalid() -> None:
    assert errors([1]) == {"state": "the state must be a JSON object, not a list"}
    c = config()
    with pytest.raises(ConfigError) as info:
        check_start_state("s", c.state_definition, {"name": 1, "count": "x", "other": True})
    assert info.value.code == "state_invalid" and info.value.status_code == 422
    assert [e["path"] for e in info.value.info.details["errors"]] == [
        "state.name",
        "state.count",
        "state.other",
    ]
    assert (
        "at state.name: must be a string" in info.value.info.message
        and "(and 2 more)" in info.value.info.message
    )
    check_start_state("s", c.state_definition, {"name": "ok"})  # no error


# save_to_state and {{ state.x }} ------------------------------------------------------------


def saving(saves: dict[str, Any], definition: Any = DEFINITION) -> StructuredConfig:
    return config(
        definition,
        {"id": "a", "type": "tool", "tool": "t", "save_to_state": saves},
        {"id": "b", "type": "finish"},
    )


CONTEXT = {"payload": {"n": 4}, "steps": {}, "run": {"id": "r", "workflow_id": "w", "step": 0}}


def test_saves_render_with_the_output_and_the_current_state() -> None:
    c = saving({"count": "{{ output.total + state.count }}", "name": "{{ payload.n }}-{{ output.who }}"})
    state = planner.initial_state(c, {"count": 10})
    context = {**CONTEXT, "state": planner.variables(state)}
    after = planner.save_to_state(c, state, c.node("a"), context, {"total": 5, "who": "Ada"})
    assert after["vars"] == {**state["vars"], "count": 15, "name": "4-Ada"}
    assert state["vars"]["count"] == 10, "the input state must not be mutated"
    moved = planner.on_success(c, after, c.node("a"), NodeResult())
    assert moved.state == {"node": "b", "vars": after["vars"]}, "saved variables travel with the cursor"
    assert planner.on_failure(c.retry, state, 1, StepFailure("x", "y").info, True, lambda: 0.5).state is state


def test_a_node_without_saves_leaves_the_state_as_it_is() -> None:
    c = config()
    state = planner.initial_state(c)
    assert planner.save_to_state(c, state, c.node("a"), CONTEXT, {"x": 1}) is state


@pytest.mark.parametrize(
    ("saves", "output", "fragment"),
    [
        ({"count": "{{ output }}"}, "seven", "cannot save to state.count: must be a number, not a string"),
        ({"vip": "{{ output }}"}, 1, "cannot save to state.vip: must be true or false"),
        ({"tags": "{{ output }}"}, {"a": 1}, "cannot save to state.tags: must be an array"),
        ({"name": "{{ output }}"}, "a\x00", "NUL character"),
        ({"name": "{{ output }}"}, "x" * (MAX_STATE_BYTES + 1), f"over the {MAX_STATE_BYTES} allowed"),
    ],
)
def test_a_mismatched_save_fails_the_step_without_retry(
    saves: dict[str, Any], output: Any, fragment: str
) -> None:
    c = saving(saves)
    state = planner.initial_state(c)
    with pytest.raises(StepFailure) as info:
        planner.save_to_state(c, state, c.node("a"), {**CONTEXT, "state": state["vars"]}, output)
    assert info.value.info.code == "state_invalid" and not info.value.retryable
    assert fragment in info.value.info.message and "node 'a'" in info.value.info.message
    assert info.value.info.solution


def test_a_save_whose_template_fails_is_a_template_error() -> None:
    c = saving({"count": "{{ output.missing }}"})
    with pytest.raises(StepFailure) as info:
        planner.save_to_state(c, planner.initial_state(c), c.node("a"), CONTEXT, {"x": 1})
    assert info.value.info.code == "template_error" and not info.value.retryable


def test_templates_read_state_variables_with_their_types() -> None:
    context = {**CONTEXT, "state": {"count": 3, "tags": ["a", "b"], "name": None}}
    assert render("{{ state.count * 2 }}", context) == 6
    assert render("{{ state.tags }}", context) == ["a", "b"]
    assert render("{{ state.name is none }}", context) is True, "an unset variable is null"
    assert render("n={{ state.count }}", context) == "n=3"
    with pytest.raises(StepFailure) as info:
        render("{{ state.cuont }}", context)
    assert info.value.info.code == "template_error" and "state" in (info.value.info.solution or "")
