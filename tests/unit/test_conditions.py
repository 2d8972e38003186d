"""Trigger conditions (issue 3): operators, paths, groups, parse errors, regex limits, time zones,
order independence and fuzzing."""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agentflow.core import condition_ops as ops
from agentflow.core import regex_guard
from agentflow.core.condition_explanations import explain
from agentflow.core.condition_predicates import compile_condition
from agentflow.core.conditions import (
    MAX_DEPTH,
    MAX_RULES,
    AllOf,
    AnyOf,
    Not,
    Rule,
    check_conditions,
    dump_conditions,
    evaluate,
    parse_conditions,
    parse_path,
    resolve,
)
from agentflow.core.errors import ConfigError

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
ABSENT = ops.ABSENT
NO_VALUE = object()


def rule_config(op: str, value: Any = NO_VALUE, *, ci: bool = False, path: str = "f") -> dict[str, Any]:
    raw: dict[str, Any] = {"path": path, "op": op}
    if value is not NO_VALUE:
        raw["value"] = value
    if ci:
        raw["case_insensitive"] = True
    return raw


def check(op: str, value: Any, field: Any, *, ci: bool = False) -> bool:
    doc = {} if field is ABSENT else {"f": field}
    condition = parse_conditions(rule_config(op, value, ci=ci))
    result = evaluate(condition, doc, now=NOW)
    assert compile_condition(condition)(doc, NOW) is result, "the compiled predicate agrees"
    return result


def errors_of(data: Any, path: str = "conditions") -> list[dict[str, str]]:
    with pytest.raises(ConfigError) as caught:
        parse_conditions(data, path)
    assert caught.value.code == "conditions_invalid"
    errors: list[dict[str, str]] = caught.value.info.details["errors"]
    return errors


# ---- every operator: match, non-match, absent field, type mismatch --------------------------

H = timedelta(hours=1)
CASES: list[tuple[str, Any, Any, bool, bool]] = [
    # (op, value, field, case_insensitive, expected)
    ("equals", "gold", "gold", False, True),
    ("equals", "gold", "silver", False, False),
    ("equals", "gold", ABSENT, False, False),
    ("equals", "1", 1, False, False),
    ("equals", 1, 1.0, False, True),
    ("equals", 1, Decimal("1.00"), False, True),
    ("equals", 1, True, False, False),
    ("equals", True, 1, False, False),
    ("equals", True, True, False, True),
    ("equals", None, None, False, True),
    ("equals", 0, None, False, False),
    ("equals", "Gold", "gold", False, False),
    ("equals", "Gold", "gOLD", True, True),
    ("equals", [1, "a"], [1.0, "a"], False, True),
    ("equals", [1, "a"], [1, "a", 2], False, False),
    ("equals", {"k": [1]}, {"k": [1.0]}, False, True),
    ("equals", {"k": 1}, {"k": 1, "j": 2}, False, False),
    ("equals", 1, float("nan"), False, False),
    ("equals", 1, Decimal("sNaN"), False, False),
    ("not_equals", "gold", "silver", False, True),
    ("not_equals", "gold", "gold", False, False),
    ("not_equals", "gold", ABSENT, False, True),
    ("not_equals", "1", 1, False, True),
    ("not_equals", "Gold", "gold", True, False),
    ("one_of", ["gold", "platinum"], "gold", False, True),
    ("one_of", ["gold", "platinum"], "silver", False, False),
    ("one_of", ["gold", "platinum"], ABSENT, False, False),
    ("one_of", ["gold", "platinum"], ["gold"], False, False),
    ("one_of", [1, 2], 2.0, False, True),
    ("one_of", [1, 2], True, False, False),
    ("one_of", ["Gold"], "GOLD", True, True),
    ("not_one_of", ["gold", "platinum"], "silver", False, True),
    ("not_one_of", ["gold", "platinum"], "gold", False, False),
    ("not_one_of", ["gold", "platinum"], ABSENT, False, True),
    ("not_one_of", ["1"], 1, False, True),
    ("contains", "urgent", "this is urgent!", False, True),
    ("contains", "urgent", "all calm", False, False),
    ("contains", "urgent", ABSENT, False, False),
    ("contains", "5", 150, False, False),
    ("contains", "URGENT", "so urgent", False, False),
    ("contains", "URGENT", "so urgent", True, True),
    ("contains", "vip", ["new", "vip"], False, True),
    ("contains", 1, [0, 1.0], False, True),
    ("contains", 1, [True], False, False),
    ("contains", "VIP", ["vip"], True, True),
    ("contains", "vip", {"vip": False}, False, True),
    ("contains", "vip", {"other": "vip"}, False, False),
    ("contains", "VIP", {"vip": 1}, True, True),
    ("contains", 1, {"1": 1}, False, False),
    ("not_contains", "urgent", "all calm", False, True),
    ("not_contains", "urgent", "urgent!", False, False),
    ("not_contains", "urgent", ABSENT, False, True),
    ("not_contains", "urgent", 42, False, True),
    ("starts_with", "INC-", "INC-42", False, True),
    ("starts_with", "INC-", "PR-42", False, False),
    ("starts_with", "INC-", ABSENT, False, False),
    ("starts_with", "4", 42, False, False),
    ("starts_with", "inc-", "INC-42", False, False),
    ("starts_with", "inc-", "INC-42", True, True),
    ("ends_with", "@example.com", "ann@example.com", False, True),
    ("ends_with", "@example.com", "ann@example.org", False, False),
    ("ends_with", "@example.com", ABSENT, False, False),
    ("ends_with", "com", ["a.com"], False, False),
    ("ends_with", "@EXAMPLE.COM", "ann@example.com", True, True),
    ("matches", r"^INC-\d+$", "INC-42", False, True),
    ("matches", r"^INC-\d+$", "INC-42a", False, False),
    ("matches", r"^INC-\d+$", ABSENT, False, False),
    ("matches", r"^\d+$", 42, False, False),
    ("matches", r"^inc-\d+$", "INC-42", False, False),
    ("matches", r"^inc-\d+$", "INC-42", True, True),
    ("matches", r"urgent", "it is urgent now", False, True),
    ("exists", NO_VALUE, "x", False, True),
    ("exists", NO_VALUE, 0, False, True),
    ("exists", NO_VALUE, "", False, True),
    ("exists", NO_VALUE, False, False, True),
    ("exists", NO_VALUE, None, False, False),
    ("exists", NO_VALUE, ABSENT, False, False),
    ("not_exists", NO_VALUE, ABSENT, False, True),
    ("not_exists", NO_VALUE, None, False, True),
    ("not_exists", NO_VALUE, 0, False, False),
    ("not_exists", NO_VALUE, [], False, False),
    ("is_empty", NO_VALUE, "", False, True),
    ("is_empty", NO_VALUE, [], False, True),
    ("is_empty", NO_VALUE, {}, False, True),
    ("is_empty", NO_VALUE, None, False, True),
    ("is_empty", NO_VALUE, ABSENT, False, True),
    ("is_empty", NO_VALUE, " ", False, False),
    ("is_empty", NO_VALUE, 0, False, False),
    ("is_empty", NO_VALUE, False, False, False),
    ("is_empty", NO_VALUE, [None], False, False),
    ("is_not_empty", NO_VALUE, "x", False, True),
    ("is_not_empty", NO_VALUE, 0, False, True),
    ("is_not_empty", NO_VALUE, "", False, False),
    ("is_not_empty", NO_VALUE, ABSENT, False, False),
    ("is_not_empty", NO_VALUE, None, False, False),
    ("gt", 3, 4, False, True),
    ("gt", 3, 3, False, False),
    ("gt", 3, 2.5, False, False),
    ("gt", 3, ABSENT, False, False),
    ("gt", 3, "4", False, False),
    ("gt", 0, True, False, False),
    ("gt", 3, Decimal("3.0001"), False, True),
    ("gt", 3, float("nan"), False, False),
    ("gt", 3, Decimal("NaN"), False, False),
    ("gt", 3, float("inf"), False, True),
    ("gt", 2**70, 2**70 + 1, False, True),
    ("gte", 3, 3, False, True),
    ("gte", 3, 2, False, False),
    ("gte", 3, ABSENT, False, False),
    ("gte", 3, [3], False, False),
    ("lt", 3, 2, False, True),
    ("lt", 3, 3, False, False),
    ("lt", 3, ABSENT, False, False),
    ("lt", 3, None, False, False),
    ("lte", 3, 3.0, False, True),
    ("lte", 3, 3.5, False, False),
    ("lte", 3, ABSENT, False, False),
    ("lte", 3, {"n": 1}, False, False),
    ("gt", "2024-05-01T10:00:00Z", "2024-05-01T12:00:00+01:00", False, True),
    ("gt", "2024-05-01T10:00:00Z", "2024-05-01T10:30:00+01:00", False, False),
    ("gt", "2024-05-01T10:00:00Z", "2024-05-01T12:00:00", False, False),
    ("gt", "2024-05-01T10:00:00Z", 1714600000, False, False),
    ("gt", 5, "2024-05-01", False, False),
    ("between", [1, 5], 1, False, True),
    ("between", [1, 5], 5, False, True),
    ("between", [1, 5], 3.5, False, True),
    ("between", [1, 5], 0.999, False, False),
    ("between", [1, 5], 6, False, False),
    ("between", [1, 5], ABSENT, False, False),
    ("between", [1, 5], "3", False, False),
    ("between", ["2024-01-01", "2024-12-31"], "2024-06-30T23:00:00-05:00", False, True),
    ("between", ["2024-01-01", "2024-12-31"], "2025-01-01", False, False),
    ("older_than", "2h", (NOW - 3 * H).isoformat(), False, True),
    ("older_than", "2h", (NOW - 1 * H).isoformat(), False, False),
    ("older_than", "2h", (NOW - 2 * H).isoformat(), False, False),
    ("older_than", "2h", ABSENT, False, False),
    ("older_than", "2h", 1714500000, False, False),
    ("older_than", "2h", "2024-05-01T07:00:00", False, False),
    ("older_than", "1d", "2024-04-29", False, True),
    ("newer_than", "2h", (NOW - 1 * H).isoformat(), False, True),
    ("newer_than", "2h", (NOW + 1 * H).isoformat(), False, True),
    ("newer_than", "2h", (NOW - 3 * H).isoformat(), False, False),
    ("newer_than", "2h", (NOW - 2 * H).isoformat(), False, False),
    ("newer_than", "2h", ABSENT, False, False),
    ("newer_than", "2h", "yesterday", False, False),
]


@pytest.mark.parametrize(("op", "value", "field", "ci", "expected"), CASES)
def test_operator(op: str, value: Any, field: Any, ci: bool, expected: bool) -> None:
    assert check(op, value, field, ci=ci) is expected


def test_the_table_covers_every_operator_in_every_situation() -> None:
    for op in ops.KNOWN:
        rows = [row for row in CASES if row[0] == op]
        assert any(row[4] for row in rows), f"{op}: no matching case"
        assert any(not row[4] for row in rows), f"{op}: no non-matching case"
        assert any(row[2] is ABSENT for row in rows), f"{op}: no absent case"
        assert len(rows) >= 4, op


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("eq", "equals"), ("==", "equals"), ("ne", "not_equals"), ("not", "not_equals"), ("!=", "not_equals"),
        ("in", "one_of"), ("not_in", "not_one_of"), ("Not In", "not_one_of"), ("starts-with", "starts_with"),
        (">", "gt"), (">=", "gte"), ("<", "lt"), ("<=", "lte"), ("EQUALS", "equals"), ("is not empty", "is_not_empty"),
    ],
)  # fmt: skip
def test_aliases_are_stored_under_the_canonical_name(alias: str, canonical: str) -> None:
    needs_value = ops.operator(canonical)[0].prepare is not None
    value = (
        (["a"] if "one_of" in canonical else 1 if canonical in ("gt", "gte", "lt", "lte") else "a")
        if needs_value
        else NO_VALUE
    )
    parsed = parse_conditions(rule_config(alias, value))
    assert isinstance(parsed, Rule)
    assert parsed.op == canonical
    assert dump_conditions(parsed)["op"] == canonical


# ---- paths ----------------------------------------------------------------------------------

DOC = {
    "data": {"account": {"tier": "gold"}, "items": [{"name": "a"}, {"name": "b"}], "account.id": "acc-1"},
    "flat.key": 7,
    "a": {"b": "nested"},
    "a.b": "flat",
    "m": [[1, 2], [3]],
    "zero": {"0": "key zero"},
    "dotted.parent": {"child": 1},
    "scalar": 5,
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("data.account.tier", "gold"),
        ("data.items.0.name", "a"),
        ("data.items[1].name", "b"),
        ("data.items[2].name", ABSENT),
        ("data.items.1", {"name": "b"}),
        ("data.account.id", "acc-1"),  # a flat key inside a nested object
        ("flat.key", 7),
        ("a.b", "nested"),  # the dot path comes before the flat key
        ("dotted.parent.child", 1),
        ("m[1][0]", 3),
        ("m.0.1", 2),
        ("zero.0", "key zero"),
        ("zero[0]", "key zero"),
        ("scalar.x", ABSENT),
        ("scalar[0]", ABSENT),
        ("nope", ABSENT),
        ("data.account.tier.more", ABSENT),
    ],
)
def test_paths_resolve(path: str, expected: Any) -> None:
    found = resolve(DOC, path)
    if expected is ABSENT:
        assert found is ABSENT
    else:
        assert found == expected


def test_flat_key_fallback_when_the_nested_path_is_missing() -> None:
    assert resolve({"a.b": "flat"}, "a.b") == "flat"
    assert resolve({"a": {}, "a.b": "flat"}, "a.b") == "flat"
    assert resolve({"a": {"b": None}, "a.b": "flat"}, "a.b") is None


@pytest.mark.parametrize("bad", ["", ".a", "a.", "a..b", "a[x]", "a[0", "a]", "a.[0]", "[-1]", "x" * 501])
def test_malformed_paths_are_config_errors(bad: str) -> None:
    errors = errors_of(rule_config("exists", path=bad))
    assert [e["path"] for e in errors] == ["conditions.path"]
    with pytest.raises(ValueError, match=r"."):
        parse_path(bad)


def test_path_segments() -> None:
    assert [(s.text, s.list_index, s.bracket) for s in parse_path("a.0[12].b c")] == [
        ("a", None, False),
        ("0", 0, False),
        ("12", 12, True),
        ("b c", None, False),
    ]


def test_documents_that_are_not_objects_resolve_nothing() -> None:
    cond = parse_conditions(rule_config("exists", path="a"))
    for doc in (None, 3, "a", ["a"], [{"a": 1}]):
        assert evaluate(cond, doc, now=NOW) is False
    assert evaluate(parse_conditions(rule_config("equals", 1, path="[0].a")), [{"a": 1}], now=NOW) is True


# ---- groups ---------------------------------------------------------------------------------

GOLD = rule_config("equals", "gold", path="tier")
BIG = rule_config("gte", 100, path="amount")


@pytest.mark.parametrize(
    ("cond", "doc", "expected"),
    [
        ({"all": [GOLD, BIG]}, {"tier": "gold", "amount": 100}, True),
        ({"all": [GOLD, BIG]}, {"tier": "gold", "amount": 99}, False),
        ({"all": [GOLD, BIG]}, {"amount": 100}, False),
        ({"any": [GOLD, BIG]}, {"tier": "silver", "amount": 100}, True),
        ({"any": [GOLD, BIG]}, {"tier": "gold"}, True),
        ({"any": [GOLD, BIG]}, {"tier": "silver", "amount": 1}, False),
        ({"not": GOLD}, {"tier": "gold"}, False),
        ({"not": GOLD}, {}, True),
        ({"not": {"not": GOLD}}, {"tier": "gold"}, True),
        ({"all": []}, {}, True),
        ([GOLD, BIG], {"tier": "gold", "amount": 500}, True),
        ([GOLD, BIG], {"tier": "gold", "amount": 5}, False),
        ([], {"anything": 1}, True),
        (
            {"any": [{"all": [GOLD, {"not": BIG}]}, {"all": [{"not": GOLD}, BIG]}]},
            {"tier": "gold", "amount": 1},
            True,
        ),
        (
            {"any": [{"all": [GOLD, {"not": BIG}]}, {"all": [{"not": GOLD}, BIG]}]},
            {"tier": "gold", "amount": 500},
            False,
        ),
        ({"any": [{"all": [GOLD, {"not": BIG}]}, {"all": [{"not": GOLD}, BIG]}]}, {"amount": 500}, True),
    ],
)
def test_groups(cond: Any, doc: dict[str, Any], expected: bool) -> None:
    assert evaluate(parse_conditions(cond), doc, now=NOW) is expected
    assert compile_condition(parse_conditions(cond))(doc, NOW) is expected


def test_list_shorthand_means_all() -> None:
    parsed = parse_conditions([GOLD, BIG])
    assert isinstance(parsed, AllOf)
    assert parsed == parse_conditions({"all": [GOLD, BIG]})
    assert dump_conditions(parsed) == {"all": [GOLD, BIG]}


def test_models_are_frozen_and_typed() -> None:
    parsed = parse_conditions({"any": [{"not": GOLD}, {"all": [BIG]}]})
    assert isinstance(parsed, AnyOf)
    negation, group = parsed.any
    assert isinstance(negation, Not) and isinstance(negation.condition, Rule)
    assert isinstance(group, AllOf)
    with pytest.raises(ValidationError):
        negation.condition.op = "gt"  # type: ignore[misc]
    built = Not(condition=Rule(path="tier", op="eq", value="gold"))
    assert built == negation
    with pytest.raises(ValidationError, match="needs a list"):
        Rule(path="tier", op="in", value="gold")


def test_dump_round_trips() -> None:
    raw = {
        "any": [
            {"path": "a", "op": "equals", "value": None},
            {"path": "b", "op": "matches", "value": "^x", "case_insensitive": True},
            {"not": {"path": "c", "op": "exists"}},
            {"path": "d", "op": "between", "value": ["2024-01-01", "2024-02-01T00:00:00Z"]},
        ]
    }
    parsed = parse_conditions(raw)
    assert dump_conditions(parsed) == raw
    assert parse_conditions(dump_conditions(parsed)) == parsed


# ---- parse errors with exact paths ----------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "path", "message"),
    [
        ({"all": [GOLD, BIG, {"path": "x", "op": "bogus"}]}, "conditions.all[2].op", "known operators: between, contains"),
        ([GOLD, {"path": "x"}], "conditions[1].op", "Field required"),
        ([{"op": "exists"}], "conditions[0].path", "Field required"),
        ({"not": {"path": "x", "op": "gt", "value": "five"}}, "conditions.not.value", "gt needs a number or an ISO date"),
        ({"any": [{"all": [{"path": "x", "op": "in", "value": "a"}]}]}, "conditions.any[0].all[0].value", "one_of needs a list"),
        ({"all": [{"path": "x", "op": "eq", "valu": 1}]}, "conditions.all[0].valu", "unknown key"),
        ({"all": [{"path": "x", "op": "equals"}]}, "conditions.all[0].value", "equals needs a value"),
        ({"all": [{"path": "x", "op": "exists", "value": True}]}, "conditions.all[0].value", "exists takes no value"),
        ({"all": "nope"}, "conditions.all", "'all' needs a list of conditions"),
        ({"any": []}, "conditions.any", "'any' needs at least one condition"),
        ({"all": [GOLD], "any": [BIG]}, "conditions", "exactly one key"),
        ({"not": GOLD, "path": "x"}, "conditions", "exactly one key"),
        ({"All": [GOLD]}, "conditions", "found keys ['All']"),
        ("tier == gold", "conditions", "must be a mapping"),
        ({"all": [GOLD, ["nested list"]]}, "conditions.all[1]", "must be a mapping"),
        ([{"path": "x", "op": "gt", "value": 1, "case_insensitive": True}], "conditions[0].case_insensitive", "applies only to"),
        ([{"path": "x", "op": "eq", "value": 1, "case_insensitive": "yes"}], "conditions[0].case_insensitive", "valid boolean"),
        ([{"path": "x", "op": 5, "value": 1}], "conditions[0].op", "unknown operator 5"),
    ],
)  # fmt: skip
def test_parse_error_paths(data: Any, path: str, message: str) -> None:
    errors = errors_of(data)
    assert [e["path"] for e in errors] == [path]
    assert message in errors[0]["message"]


def test_every_problem_is_reported_at_once_with_a_custom_prefix() -> None:
    data = {"all": [{"path": "a", "op": "nope"}, GOLD, {"any": [{"path": "b", "op": "gt", "value": [1]}]}]}
    errors = errors_of(data, "triggers[0].conditions")
    assert [e["path"] for e in errors] == [
        "triggers[0].conditions.all[0].op",
        "triggers[0].conditions.all[2].any[0].value",
    ]
    condition, collected = check_conditions(data, "c")
    assert condition is None
    assert [e["path"] for e in collected] == ["c.all[0].op", "c.all[2].any[0].value"]
    with pytest.raises(
        ConfigError,
        match=r"^triggers\[0\]\.conditions\.all\[0\]\.op: unknown operator 'nope'.* \(and 1 more\)$",
    ):
        parse_conditions(data, "triggers[0].conditions")


def test_depth_is_bounded() -> None:
    deep: Any = GOLD
    for _ in range(MAX_DEPTH - 1):
        deep = {"not": deep}
    assert evaluate(parse_conditions(deep), {"tier": "gold"}, now=NOW) is ((MAX_DEPTH - 1) % 2 == 0)
    errors = errors_of({"not": deep})
    assert errors == [
        {
            "path": "conditions" + ".not" * MAX_DEPTH,
            "message": f"conditions nest more than {MAX_DEPTH} levels deep; flatten them",
        }
    ]
    hostile: Any = GOLD
    for _ in range(5000):
        hostile = {"any": [hostile]}
    assert [e["path"] for e in errors_of(hostile)] == ["conditions" + ".any[0]" * MAX_DEPTH]


def test_size_is_bounded() -> None:
    assert isinstance(parse_conditions([GOLD] * MAX_RULES), AllOf)
    errors = errors_of([GOLD] * (MAX_RULES + 1))
    assert errors == [
        {"path": "conditions", "message": f"more than {MAX_RULES} rules; simplify the conditions"}
    ]
    started = time.perf_counter()
    errors_of([GOLD] * 1_000_000)
    assert time.perf_counter() - started < 1.0  # stops at the limit instead of validating a million rules


@pytest.mark.parametrize(
    ("op", "value", "message"),
    [
        ("one_of", "gold", "one_of needs a list of values"),
        ("not_in", {"a": 1}, "not_one_of needs a list"),
        ("one_of", list(range(1001)), "one_of lists at most 1000 values"),
        ("contains", ["a"], "contains needs one text, number, boolean or null"),
        ("starts_with", 5, "starts_with needs text; got a number"),
        ("ends_with", None, "ends_with needs text; got a null"),
        ("gt", "5", "write 5, not '5'"),
        ("gt", True, "gt needs a number or an ISO date"),
        ("lt", None, "lt needs a number or an ISO date"),
        ("gte", "2024-05-01T10:00:00", "has no time zone; add one, e.g. '2024-05-01T10:00:00Z'"),
        ("lte", "2024-02-30", "lte needs a number or an ISO date"),
        ("between", [5, 1], "between needs low <= high"),
        ("between", [1], "between needs a list [low, high]"),
        ("between", [1, "2024-01-01"], "two numbers or two dates, not one of each"),
        ("between", ["2024-02-01", "2024-01-01T00:00:00Z"], "between needs low <= high"),
        ("older_than", "soon", "older_than needs a duration such as '2h'"),
        ("newer_than", True, "newer_than needs a duration"),
        ("newer_than", "-2h", "newer_than needs a duration"),
        ("matches", 5, "matches needs text"),
        ("matches", "(", "matches has an invalid pattern '('"),
        ("equals", float("nan"), "finite number"),
        ("equals", {1: "a"}, "value must be JSON"),
        ("equals", {"a", "b"}, "value must be JSON"),
    ],
)
def test_values_are_checked_per_operator(op: str, value: Any, message: str) -> None:
    errors = errors_of({"all": [GOLD, rule_config(op, value)]})
    assert [e["path"] for e in errors] == ["conditions.all[1].value"]
    assert message in errors[0]["message"]


def test_yaml_dates_become_iso_text() -> None:
    config = yaml.safe_load(
        "- {path: due, op: lt, value: 2024-05-01}\n- {path: at, op: gte, value: 2024-05-01T10:00:00Z}"
    )
    parsed = parse_conditions(config)
    assert dump_conditions(parsed)["all"][0]["value"] == "2024-05-01"
    assert evaluate(parsed, {"due": "2024-04-30", "at": "2024-05-01T11:00:00+01:00"}, now=NOW) is True
    assert evaluate(parsed, {"due": "2024-04-30", "at": "2024-05-01T10:59:00+01:00"}, now=NOW) is False
    naive = yaml.safe_load("{path: at, op: gte, value: 2024-05-01 10:00:00}")
    assert "no time zone" in errors_of(naive)[0]["message"]


# ---- dates and time zones -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "value", "field", "expected"),
    [
        ("gte", "2024-05-01T10:00:00Z", "2024-05-01T12:00:00+02:00", True),  # the same instant
        ("lte", "2024-05-01T10:00:00Z", "2024-05-01T12:00:00+02:00", True),
        ("gt", "2024-05-01T10:00:00Z", "2024-05-01T12:00:00+02:00", False),
        ("lt", "2024-05-01T10:00:00+05:30", "2024-05-01T04:29:59Z", True),
        ("lt", "2024-05-01T10:00:00+0530", "2024-05-01T04:30:00Z", False),
        ("gt", "2024-05-01T10:00:00-05", "2024-05-01T15:00:01Z", True),
        ("gt", "2024-05-01T10:00:00Z", "2024-05-01T10:00:00.000000001Z", False),  # nanoseconds truncate
        ("gt", "2024-05-01T10:00:00Z", "2024-05-01T10:00:00.000001Z", True),
        ("gt", "2024-05-01T10:00:00Z", "2024-05-01t10:00:01z", True),
        ("gt", "2024-05-01T10:00:00Z", "2024-05-01 10:00:01+00:00", True),
        ("gte", "2024-05-01", "2024-05-01", True),  # two dates compare as days
        ("gt", "2024-05-01", "2024-05-01", False),
        ("gte", "2024-05-01", "2024-05-01T00:00:00Z", True),  # a day starts at midnight UTC
        ("lte", "2024-05-01", "2024-05-01T00:00:00Z", True),
        ("gt", "2024-05-01", "2024-04-30T23:00:00-02:00", True),
        ("lt", "2024-05-01T00:00:00+02:00", "2024-04-30", True),
        ("gt", "2024-05-01", "2024-05-01T00:00:00", False),  # naive field: not comparable
        ("gt", "2024-05-01", "2024-02-30", False),
        ("gt", "2024-05-01", "2024-05-01T10:00:00+99:00", False),
        ("gt", "2024-05-01", "0001-01-01T00:00:00+01:00", False),  # out of range in UTC
        ("gt", "2024-05-01", "9999-12-31T23:59:59-01:00", False),
        ("lt", "2024-05-01", "0001-01-01", True),
    ],
)
def test_date_comparisons_across_time_zones(op: str, value: str, field: str, expected: bool) -> None:
    assert check(op, value, field) is expected


def test_datetime_objects_in_documents() -> None:
    cond = parse_conditions(rule_config("gt", "2024-05-01T10:00:00Z"))
    assert evaluate(cond, {"f": datetime(2024, 5, 1, 11, tzinfo=timezone(timedelta(hours=-1)))}, now=NOW)
    assert not evaluate(cond, {"f": datetime(2024, 5, 1, 11)}, now=NOW)  # naive
    assert evaluate(cond, {"f": date(2024, 5, 2)}, now=NOW)


def test_age_uses_the_injected_clock_in_any_zone() -> None:
    cond = parse_conditions(rule_config("older_than", "PT90M"))
    field = {"f": "2024-05-01T12:00:00+02:00"}  # 10:00 UTC
    assert evaluate(cond, field, now=datetime(2024, 5, 1, 11, 31, tzinfo=UTC)) is True
    assert evaluate(cond, field, now=datetime(2024, 5, 1, 11, 29, tzinfo=UTC)) is False
    assert (
        evaluate(cond, field, now=datetime(2024, 5, 1, 13, 31, tzinfo=timezone(timedelta(hours=2)))) is True
    )
    with pytest.raises(ValueError, match="timezone-aware"):
        evaluate(cond, field, now=datetime(2024, 5, 1, 12))
    with pytest.raises(ValueError, match="timezone-aware"):
        explain(cond, field, now=datetime(2024, 5, 1, 12))


# ---- regular expressions --------------------------------------------------------------------


def test_pattern_length_is_limited() -> None:
    assert check("matches", "a" * ops.MAX_PATTERN_LENGTH, "a" * 200) is True
    errors = errors_of(rule_config("matches", "a" * (ops.MAX_PATTERN_LENGTH + 1)))
    assert errors == [
        {"path": "conditions.value", "message": "matches needs a pattern of at most 200 characters; got 201"}
    ]


def test_input_length_is_limited() -> None:
    cond = parse_conditions(rule_config("matches", "needle"))
    at_limit = "x" * (regex_guard.MAX_MATCH_INPUT - 6) + "needle"
    assert evaluate(cond, {"f": at_limit}, now=NOW) is True
    over = explain(cond, {"f": "x" + at_limit}, now=NOW)
    assert over.matched is False
    assert over.reason == "the text has 10001 characters; this pattern checks at most 10000 safely"


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"^(a+)+$", "another variable repeat"),
        (r"(a*)*b", "another variable repeat"),
        (r"^(a|aa)+$", "alternation"),
        (r"(x+x+)+y", "another variable repeat"),
        (r"(.*a){12}", "another variable repeat"),
        (r"^(\w+\s?)*$", "another variable repeat"),
        (r"(a)\1", "backreferences"),
        (r"(a)?(?(1)b|c)", "backreferences"),
        (r".*.*.*.*=", "could take too long"),
    ],
)
def test_catastrophic_patterns_are_refused(pattern: str, why: str) -> None:
    errors = errors_of(rule_config("matches", pattern))
    assert [e["path"] for e in errors] == ["conditions.value"]
    assert why in errors[0]["message"]


@pytest.mark.parametrize(
    "pattern",
    [
        r".*.*=",
        r"a.*a.*b",
        r"\d+-\d+",
        r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}",
        ".*" + "x" * 150 + "=",
        r"x{0,5000}y{0,5000}z",
    ],
)
def test_accepted_patterns_stay_fast_on_hostile_input(pattern: str) -> None:
    # Without the cost bound, re.search(".*.*=", "x" * 10_000) takes minutes.
    cond = parse_conditions(rule_config("matches", pattern))
    for text in ("x" * 10_000, "a" * 10_000, "1" * 10_000, "x" * 250, "a" * 250, "1" * 250):
        started = time.perf_counter()
        explanation = explain(cond, {"f": text}, now=NOW)
        assert time.perf_counter() - started < 1.0
        assert explanation.matched is False
        assert explanation.reason == "did not match" or "this pattern checks at most" in explanation.reason


def test_common_patterns_check_long_text() -> None:
    for pattern in (r"urgent", r"^INC-\d+$", r"(?i)\burgent\b|asap", r"^[^@]+@example\.com$", r"colou?r"):
        cond = parse_conditions(rule_config("matches", pattern))
        assert explain(cond, {"f": "z" * regex_guard.MAX_MATCH_INPUT}, now=NOW).reason == "did not match", (
            pattern
        )


# ---- explanations ---------------------------------------------------------------------------


def test_explanations_record_every_rule() -> None:
    cond = parse_conditions([GOLD, {"any": [BIG, {"not": rule_config("exists", path="vip")}]}])
    doc = {"tier": "gold", "amount": "lots", "vip": True}
    explanation = explain(cond, doc, now=NOW)
    assert explanation.matched is evaluate(cond, doc, now=NOW) is False
    assert explanation.to_json() == {
        "matched": False,
        "all": [
            {"matched": True, "path": "tier", "op": "equals", "value": "gold", "present": True, "actual": "gold", "reason": "matched"},
            {
                "matched": False,
                "any": [
                    {
                        "matched": False, "path": "amount", "op": "gte", "value": 100, "present": True, "actual": "lots",
                        "reason": "the field is a string, not a number",
                    },
                    {
                        "matched": False,
                        "not": {"matched": True, "path": "vip", "op": "exists", "present": True, "actual": True, "reason": "matched"},
                    },
                ],
            },
        ],
    }  # fmt: skip


def test_explanations_of_negated_operators_and_absent_fields() -> None:
    explanation = explain(parse_conditions(rule_config("not_one_of", ["a"], path="x.y")), {}, now=NOW)
    assert explanation.to_json() == {
        "matched": True, "path": "x.y", "op": "not_one_of", "value": ["a"], "present": False,
        "reason": "negation of one_of (the field is absent)",
    }  # fmt: skip


def test_explanations_are_json_safe_and_bounded() -> None:
    weird = {
        "f": {
            "big": 2**80, "nan": float("nan"), "dec": Decimal("1.5"), "snan": Decimal("sNaN"), "when": datetime(2024, 1, 1),
            "long": "y" * 5000, "many": list(range(100)), "deep": [[[[[["bottom"]]]]]], "obj": object(), 3: "int key",
            "bytes": b"\x00",
        }
    }  # fmt: skip
    actual = explain(parse_conditions(rule_config("exists")), weird, now=NOW).to_json()["actual"]
    text = json.dumps(actual, allow_nan=False)
    assert len(text) < 3000
    assert orjson.loads(orjson.dumps(actual)) == actual
    assert actual["big"] == str(2**80)
    assert actual["nan"] == "nan"
    assert actual["dec"] == 1.5
    assert actual["when"] == "2024-01-01T00:00:00"
    assert actual["long"] == "y" * 500 + "…"
    assert actual["many"] == [*range(20), "…"]
    assert actual["deep"] == [[["<list of 1>"]]]  # four levels below the field, then a summary
    assert actual["obj"] == "<object>"
    assert actual["3"] == "int key"


def test_truncated_explanations_do_not_depend_on_key_order() -> None:
    big = {f"k{i:02}": i for i in range(30)}
    cond = parse_conditions(rule_config("exists"))
    forward = explain(cond, {"f": big}, now=NOW).to_json()
    backward = explain(cond, {"f": dict(reversed(big.items()))}, now=NOW).to_json()
    assert forward == backward
    assert list(forward["actual"]) == [f"k{i:02}" for i in range(20)]


# ---- order independence (seed 004: conditions re-checked on every event) --------------------


def test_conditions_fire_when_the_last_needed_field_arrives_in_either_order() -> None:
    cond = parse_conditions(
        [
            rule_config("gte", 2, path="incident.severity"),
            rule_config("equals", "Production", path="incident.custom.affected"),
        ]
    )
    updates = [("severity", 3), ("custom", {"affected": "Production"}), ("summary", "db down")]
    for order in ([0, 1, 2], [1, 0, 2], [2, 1, 0], [1, 2, 0]):
        incident: dict[str, Any] = {}
        decisions = []
        for index in order:
            key, value = updates[index]
            incident = {**incident, key: value}
            decisions.append(evaluate(cond, {"incident": incident}, now=NOW))
        needed = max(order.index(0), order.index(1))
        assert decisions == [i >= needed for i in range(3)], order


KEYS = st.sampled_from(["a", "b", "c", "a.b", "0", "1", "f"])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(-10, 10, allow_nan=False)
    | st.sampled_from(
        ["", "gold", "Gold", "INC-7", "2024-05-01", "2024-05-01T10:00:00Z", "2024-05-01T10:00:00", "x.y"]
    )
    | st.text(max_size=6)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=25,
)
DOCS = st.dictionaries(KEYS, JSON, max_size=6)
INSTANTS = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2050, 1, 1)).flatmap(
    lambda moment: st.sampled_from(
        [moment.date().isoformat(), moment.replace(tzinfo=UTC).isoformat(), moment.isoformat() + "+05:30"]
    )
)
BOUNDS = st.integers(-5, 5) | st.floats(-10, 10, allow_nan=False) | INSTANTS
PATTERNS = st.sampled_from([r"^gold$", r"INC-\d+", r"(?i)x\.y", r"^\d{4}-\d{2}", r".*.*=", r"^$", r"[a-z]+"])


@st.composite
def rules(draw: st.DrawFn) -> dict[str, Any]:
    op = draw(st.sampled_from(ops.KNOWN))
    segments = draw(
        st.lists(st.sampled_from(["a", "b", "c", "0", "1", "f", "[0]", "[1]"]), min_size=1, max_size=3)
    )
    path = segments[0].strip("[]") + "".join(s if s.startswith("[") else "." + s for s in segments[1:])
    base = ops.NEGATIONS.get(op, op)
    value: Any
    if base in ("equals",):
        value = draw(JSON)
    elif base == "one_of":
        value = draw(st.lists(SCALARS, max_size=4))
    elif base == "contains":
        value = draw(SCALARS)
    elif base in ("starts_with", "ends_with"):
        value = draw(st.sampled_from(["", "g", "INC", "2024", "Go"]) | st.text(max_size=3))
    elif base == "matches":
        value = draw(PATTERNS)
    elif base in ("gt", "gte", "lt", "lte"):
        value = draw(BOUNDS)
    elif base == "between":
        low, high = draw(st.integers(-5, 5)), draw(st.integers(-5, 5))
        value = draw(
            st.sampled_from([[min(low, high), max(low, high)], ["2000-01-01", "2030-01-01T00:00:00Z"]])
        )
    elif base in ("older_than", "newer_than"):
        value = draw(st.sampled_from(["0s", "2h", "1d", 90, "P30D"]))
    else:
        return rule_config(op, path=path)
    fold = ops.operator(op)[0].folds and draw(st.booleans())
    return rule_config(op, value, ci=fold, path=path)


CONDITIONS = st.recursive(
    rules(),
    lambda inner: (
        st.lists(inner, max_size=3).map(lambda xs: {"all": xs})
        | st.lists(inner, min_size=1, max_size=3).map(lambda xs: {"any": xs})
        | inner.map(lambda x: {"not": x})
    ),
    max_leaves=8,
)


def reordered(value: Any, rnd: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {key: reordered(item, rnd) for key, item in items}
    if isinstance(value, list):
        return [reordered(item, rnd) for item in value]
    return value


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(raw=CONDITIONS, doc=DOCS, rnd=st.randoms(use_true_random=False))
def test_evaluation_depends_only_on_content_not_arrival_order(
    raw: Any, doc: dict[str, Any], rnd: random.Random
) -> None:
    cond = parse_conditions(raw)
    shuffled = reordered(doc, rnd)
    assert shuffled == doc
    assert evaluate(cond, shuffled, now=NOW) is evaluate(cond, doc, now=NOW)
    assert explain(cond, shuffled, now=NOW).to_json() == explain(cond, doc, now=NOW).to_json()
    # Fields arriving one by one, in any order, end in the same decision as the final document.
    incremental: dict[str, Any] = {}
    for key, value in shuffled.items():
        incremental = {**incremental, key: value}
    assert evaluate(cond, incremental, now=NOW) is evaluate(cond, doc, now=NOW)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(raw=CONDITIONS, doc=JSON | DOCS)
def test_evaluate_never_raises_and_explain_agrees(raw: Any, doc: Any) -> None:
    cond = parse_conditions(raw)
    result = evaluate(cond, doc, now=NOW)
    assert isinstance(result, bool)
    explanation = explain(cond, doc, now=NOW)
    assert explanation.matched is result
    assert compile_condition(cond)(doc, NOW) is result
    json.dumps(explanation.to_json(), allow_nan=False)
    orjson.dumps(explanation.to_json())
    assert parse_conditions(dump_conditions(cond)) == cond


@settings(max_examples=300)
@given(raw=rules(), doc=DOCS)
def test_negated_operators_are_exact_negations(raw: dict[str, Any], doc: dict[str, Any]) -> None:
    negated = {v: k for k, v in ops.NEGATIONS.items()}
    op = ops.canonical(raw["op"])
    assert op is not None
    if op in ops.NEGATIONS or op in negated:
        flipped = {**raw, "op": ops.NEGATIONS.get(op) or negated[op]}
        assert evaluate(parse_conditions(flipped), doc, now=NOW) is not evaluate(
            parse_conditions(raw), doc, now=NOW
        )
    assert evaluate(parse_conditions({"not": raw}), doc, now=NOW) is not evaluate(
        parse_conditions(raw), doc, now=NOW
    )


class Hostile:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing me")

    __hash__ = object.__hash__

    def __str__(self) -> str:
        raise RuntimeError("no printing me")


def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"a": [value]}
    return value


WEIRD_VALUES = [
    float("nan"), float("inf"), -float("inf"), Decimal("NaN"), Decimal("sNaN"), Decimal("-Infinity"), 2**200,
    datetime(2024, 1, 1), datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))), date.max, b"bytes", {1, 2},
    Hostile(), [Hostile()], {Hostile(): 1}, _deep(20_000), "x" * 100_000, "\x00\ud800", [float("nan")] * 3,
]  # fmt: skip
SAMPLE_RULES = [
    rule_config("equals", [1, {"a": "b"}]), rule_config("equals", 1), rule_config("one_of", [1, "a", None]),
    rule_config("contains", "a", ci=True), rule_config("contains", 1), rule_config("starts_with", "x", ci=True),
    rule_config("matches", ".*.*="), rule_config("exists"), rule_config("is_empty"), rule_config("gt", 1),
    rule_config("lte", "2024-01-01T00:00:00Z"), rule_config("between", ["2024-01-01", "2025-01-01"]),
    rule_config("older_than", "1h"), rule_config("newer_than", "1h"), rule_config("not_contains", "a"),
    rule_config("ends_with", "x"), rule_config("gte", "2024-01-01"), rule_config("lt", 5.5),
]  # fmt: skip


@pytest.mark.parametrize("value", WEIRD_VALUES, ids=lambda v: type(v).__name__)
def test_unusual_python_data_never_raises(value: Any) -> None:
    cond = parse_conditions({"any": SAMPLE_RULES})
    for doc in ({"f": value}, {"f": {"a": value}}, value):
        assert isinstance(evaluate(cond, doc, now=NOW), bool)
        explanation = explain(cond, doc, now=NOW)
        assert len(explanation.children) == len(SAMPLE_RULES)
        json.dumps(explanation.to_json(), allow_nan=False)
        orjson.dumps(explanation.to_json())


def test_sample_rules_cover_every_base_operator() -> None:
    assert {ops.operator(ops.canonical(r["op"]) or "")[0].name for r in SAMPLE_RULES} == set(ops.OPERATORS)
