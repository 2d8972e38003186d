"""The condition index: a condition it leaves out never holds, whatever the event."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentflow.core.condition_index import ConditionIndex, equality_key, first_equality
from agentflow.core.condition_predicates import compile_condition
from agentflow.core.conditions import parse_conditions

NOW = datetime(2026, 12, 6, tzinfo=UTC)

_SCALARS = st.sampled_from([0, 1, 1.0, 2, -0.0, True, False, None, "1", "a", "A", "b", ""])
_OPERANDS = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=2), st.just({"k": 1}))
_VALUES = st.one_of(_OPERANDS, st.just(float("nan")))
_PATHS = st.sampled_from(["data.x", "data.y", "data.x.z"])
_RULES = st.one_of(
    st.builds(lambda p, v: {"path": p, "op": "equals", "value": v}, _PATHS, _OPERANDS),
    st.builds(lambda p, v: {"path": p, "op": "one_of", "value": v}, _PATHS, st.lists(_SCALARS, max_size=3)),
    st.builds(lambda p, v: {"path": p, "op": "not_equals", "value": v}, _PATHS, _SCALARS),
    st.builds(
        lambda p, v: {"path": p, "op": "equals", "value": v, "case_insensitive": True}, _PATHS, _SCALARS
    ),
    st.builds(lambda p: {"path": p, "op": "exists"}, _PATHS),
    st.builds(lambda p: {"path": p, "op": "gt", "value": 0}, _PATHS),
)
_CONDITIONS = st.one_of(
    st.none(),
    _RULES,
    st.lists(_RULES, max_size=3),
    st.builds(lambda rules: {"any": rules}, st.lists(_RULES, min_size=1, max_size=2)),
)
_DOCUMENTS = st.fixed_dictionaries(
    {},
    optional={
        "data": st.fixed_dictionaries({}, optional={"x": st.one_of(_VALUES, st.just({"z": 1})), "y": _VALUES})
    },
)


@settings(max_examples=300)
@given(st.lists(_CONDITIONS, min_size=1, max_size=6), st.lists(_DOCUMENTS, min_size=1, max_size=4))
def test_a_condition_left_out_never_holds(raw: list[Any], documents: list[dict[str, Any]]) -> None:
    parsed = [None if c is None else parse_conditions(c) for c in raw]
    index = ConditionIndex(parsed)
    for document in documents:
        possible = index.candidates(document)
        for position, condition in enumerate(parsed):
            holds = condition is None or compile_condition(condition)(document, NOW)
            if holds:
                assert position in possible, (raw[position], document)


def test_an_event_finds_only_the_conditions_its_field_can_meet() -> None:
    raw: list[Any] = [
        [
            {"path": "data.bucket", "op": "equals", "value": k},
            {"path": "data.tier", "op": "equals", "value": "gold"},
        ]
        for k in range(50)
    ]
    raw += [
        {"path": "data.plan", "op": "one_of", "value": ["pro", "team"]},
        [{"path": "data.tier", "op": "exists"}, {"path": "data.bucket", "op": "equals", "value": 3}],
        None,
    ]
    index = ConditionIndex([None if c is None else parse_conditions(c) for c in raw])
    assert index.candidates({"data": {"bucket": 7, "tier": "gold"}}) == {7, 51, 52}
    assert index.candidates({"data": {"bucket": 7.0}}) == {7, 51, 52}, "7.0 equals 7"
    assert index.candidates({"data": {"bucket": "7"}}) == {51, 52}, "a string is not a number"
    assert index.candidates({"data": {"plan": "team"}}) == {50, 51, 52}
    assert index.candidates({"data": {}}) == {51, 52}, "an absent field meets no equality"
    assert index.candidates({"data": {"bucket": [7]}}) == {51, 52}


def test_keys_are_equal_exactly_when_the_values_are() -> None:
    assert equality_key(1) == equality_key(1.0) == equality_key(Decimal(1))
    assert equality_key(True) != equality_key(1) and equality_key(None) != equality_key(0)
    assert equality_key("1") != equality_key(1)
    assert equality_key(float("nan")) is None and equality_key([1]) is None and equality_key({}) is None
    assert equality_key(NOW) is None


def test_only_a_leading_plain_equality_files_a_condition() -> None:
    def first(raw: Any) -> Any:
        return first_equality(parse_conditions(raw))

    assert first({"path": "a", "op": "eq", "value": 1}) == ("a", [("number", 1)])
    assert first({"path": "a", "op": "in", "value": ["x", True]}) == (
        "a",
        [("string", "x"), ("boolean", True)],
    )
    assert first([{"path": "a", "op": "gt", "value": 1}, {"path": "b", "op": "eq", "value": 1}]) is None
    assert first({"path": "a", "op": "ne", "value": 1}) is None, "negated"
    assert first({"path": "a", "op": "eq", "value": "x", "case_insensitive": True}) is None, "folded"
    assert first({"path": "a", "op": "eq", "value": [1]}) is None, "a list operand"
    assert first({"path": "a", "op": "in", "value": []}) is None, "one_of nothing"
    assert first({"any": [{"path": "a", "op": "eq", "value": 1}]}) is None
    assert first([]) is None, "an empty all always holds"
