"""The bounded YAML loader: aliases and nesting cannot blow up memory or the stack."""

from __future__ import annotations

import time

import pytest
import yaml

from agentflow.core import safe_yaml


def laughs(levels: int, width: int = 9) -> str:
    lines = ['a0: &a0 "lol"']
    for level in range(1, levels + 1):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def test_ordinary_documents_and_modest_anchors_load() -> None:
    assert safe_yaml.load("") is None
    assert safe_yaml.load('{"a": [1, 2]}') == {"a": [1, 2]}
    assert safe_yaml.load("base: &b {x: 1}\nuse: {<<: *b, y: 2}\n") == {
        "base": {"x": 1},
        "use": {"x": 1, "y": 2},
    }
    assert len(safe_yaml.load(laughs(4))["a4"]) == 9  # 9**4 = 6,561 values: fine


@pytest.mark.parametrize("levels", [6, 9, 30])
def test_exploding_aliases_are_refused_at_once(levels: int) -> None:
    started = time.monotonic()
    with pytest.raises(safe_yaml.YamlLimitError, match="aliases"):
        safe_yaml.load(laughs(levels))
    assert time.monotonic() - started < 0.5


def test_a_recursive_alias_is_refused() -> None:
    with pytest.raises(safe_yaml.YamlLimitError, match="its own anchor"):
        safe_yaml.load("&a [*a]")


@pytest.mark.parametrize(
    "text", ["[" * 65 + "]" * 65, "a:\n" + "".join(f"{' ' * i}b{i}:\n" for i in range(1, 80))]
)
def test_deep_nesting_is_refused(text: str) -> None:
    with pytest.raises(safe_yaml.YamlLimitError, match="deeper than 64"):
        safe_yaml.load(text)


def test_aliases_cannot_stack_nesting_past_the_limit() -> None:
    deep = "[" * 40 + "]" * 40
    with pytest.raises(safe_yaml.YamlLimitError, match="deeper than 64"):
        safe_yaml.load(f"a: &a {deep}\nb: [[[[[[[[[[[[[[[[[[[[[[[[[[[[*a]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n")


def test_limit_errors_are_yaml_errors_with_a_position() -> None:
    with pytest.raises(yaml.YAMLError) as caught:
        safe_yaml.load("x: 1\ny: &a [*a]\n")
    assert isinstance(caught.value, yaml.MarkedYAMLError) and caught.value.problem_mark is not None
