"""``LazyContext``: a template context whose names are made when first read."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.core.templating import render
from agentflow.core.templating.lazy_context import LazyContext


def counting(calls: list[str], name: str, value: Any) -> Any:
    def make() -> Any:
        calls.append(name)
        return value

    return make


def test_nothing_is_made_until_read_and_each_name_once() -> None:
    calls: list[str] = []
    context = LazyContext({"a": counting(calls, "a", 1), "b": counting(calls, "b", {"x": 2})})
    assert calls == []
    assert context["b"] == {"x": 2}
    assert context["b"] is context["b"]
    assert calls == ["b"]
    assert context.get("a") == 1 and calls == ["b", "a"]


def test_it_is_a_mapping_of_its_names() -> None:
    context = LazyContext({"a": lambda: 1, "b": lambda: 2})
    assert sorted(context) == ["a", "b"] and len(context) == 2
    assert dict(context) == {"a": 1, "b": 2}
    assert {**context, "c": 3} == {"a": 1, "b": 2, "c": 3}
    assert "a" in context and "z" not in context
    assert context.get("z") is None
    with pytest.raises(KeyError):
        context["z"]


def test_templates_render_in_it_and_make_only_what_they_read() -> None:
    calls: list[str] = []
    context = LazyContext(
        {
            "payload": counting(calls, "payload", {"name": "Ada"}),
            "steps": counting(calls, "steps", {"fetch": {"n": 3}}),
        }
    )
    assert render("{{ payload.name }}", context) == "Ada"
    assert render({"n": "{{ steps.fetch.n }}", "fixed": 1}, context) == {"n": 3, "fixed": 1}
    assert render("Hello {{ payload.name }}!", context) == "Hello Ada!"
