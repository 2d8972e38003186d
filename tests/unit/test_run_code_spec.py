"""The ``run_code`` node's config: each mistake refused at publish with its path, what it
declares, the step's time limit, and the refusal of an engine with code steps off."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from agentflow.core import planner
from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ConfigError
from agentflow.core.graph.catalog import describe_kind
from agentflow.core.graph.code_nodes import RunCodeNode, python_problem, refuse_code_steps

MAIN = "def main(input):\n    return input"


def code_node(**fields: Any) -> dict[str, Any]:
    return {"id": "calc", "type": "run_code", "code": MAIN, **fields}


def config_of(*nodes: dict[str, Any]) -> StructuredConfig:
    config = validate_config({"name": "c", "kind": "structured", "nodes": list(nodes)})
    assert isinstance(config, StructuredConfig)
    return config


def first_error(*nodes: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        config_of(*nodes)
    errors: list[dict[str, str]] = info.value.info.details["errors"]
    return errors[0]


@pytest.mark.parametrize(
    ("node", "path", "words"),
    [
        ({"id": "c", "type": "run_code"}, "nodes[0].code", "Field required"),
        (code_node(code=""), "nodes[0].code", "at least 1 character"),
        (code_node(code="x" * 100_001), "nodes[0].code", "at most 100000 characters"),
        (code_node(language="ruby"), "nodes[0].language", "'python' or 'javascript'"),
        (code_node(timeout="0.5s"), "nodes[0].timeout", "from 1 second to 5 minutes"),
        (code_node(timeout="6m"), "nodes[0].timeout", "from 1 second to 5 minutes"),
        (code_node(memory_mb=32), "nodes[0].memory_mb", "greater than or equal to 64"),
        (code_node(memory_mb=8192), "nodes[0].memory_mb", "less than or equal to 4096"),
        (code_node(max_output_bytes=0), "nodes[0].max_output_bytes", "greater than or equal to 1"),
        (
            code_node(max_output_bytes=20_000_000),
            "nodes[0].max_output_bytes",
            "less than or equal to 10485760",
        ),
        (code_node(code="def main(input):\n  return {"), "nodes[0]", "not valid Python at line 2"),
        (code_node(code="def helper(input):\n    return 1"), "nodes[0]", "defines no function main(input)"),
        (code_node(code="def main(input):\n    return 1\0"), "nodes[0]", "not valid Python"),
        (
            code_node(code="def outer():\n    def main(input):\n        return 1"),
            "nodes[0]",
            "at its top level",
        ),
        (
            code_node(code="const f = (x) => x;", language="javascript"),
            "nodes[0]",
            "defines no function main",
        ),
        (code_node(colour="red"), "nodes[0].colour", "Extra inputs are not permitted"),
    ],
)
def test_each_mistake_is_refused_at_its_path(node: dict[str, Any], path: str, words: str) -> None:
    error = first_error(node)
    assert error["path"] == path, error
    assert words in error["message"], error


@pytest.mark.parametrize(
    "source",
    [
        MAIN,
        "async def main(input):\n    return 1",
        "class main:\n    def __init__(self, input):\n        self.input = input",
        "main = lambda input: input",
        "main: object = print",
        "from json import dumps as main",
        "import main",
        "import json\nprint('loading')\nif True:\n    pass\ndef main(input):\n    return json.dumps(input)",
        "# {{ not a template }}\ndef main(input):\n    return f'{{{input}}}'",
    ],
)
def test_python_code_that_binds_main_at_its_top_level_is_accepted(source: str) -> None:
    assert python_problem(source) is None
    node = config_of(code_node(code=source)).node("calc")
    assert isinstance(node, RunCodeNode) and node.code == source, "the code is kept as written"


def test_the_defaults_and_what_the_kind_declares() -> None:
    node = config_of(code_node()).node("calc")
    assert isinstance(node, RunCodeNode)
    assert (node.language, node.input, node.memory_mb, node.max_output_bytes) == (
        "python",
        "{{ input }}",
        256,
        1 << 20,
    )
    assert node.time_limit() == timedelta(seconds=10)
    described = describe_kind(RunCodeNode)
    assert described["kind"] == "run_code" and described["ports"] == ["result", "error"]
    assert described["title"] == "Run code" and "main(input)" in described["description"]
    assert set(described["config_schema"]["properties"]) >= {
        "language",
        "code",
        "input",
        "memory_mb",
        "max_output_bytes",
    }


def test_the_step_may_run_past_the_codes_time_limit_to_stop_it_and_say_why() -> None:
    config = config_of(code_node(timeout="2s"), {"id": "other", "type": "finish", "timeout": "2s"})
    node = config.node("calc")
    assert isinstance(node, RunCodeNode) and node.time_limit() == timedelta(seconds=2)
    assert planner.step_timeout(config, node, None) == 7.0, "2 s for the code, 5 s to stop it"
    assert planner.step_timeout(config, config.node("other"), None) == 2.0, "other kinds: their timeout"
    default = config_of(code_node())
    assert planner.step_timeout(default, default.node("calc"), timedelta(minutes=9)) == 15.0


def test_javascript_code_naming_main_is_accepted_without_parsing() -> None:
    node = config_of(code_node(language="javascript", code="const main = (input) => input.length;")).node(
        "calc"
    )
    assert isinstance(node, RunCodeNode) and node.language == "javascript"


def test_the_code_is_never_treated_as_a_template_but_the_input_is() -> None:
    with_braces = "def main(input):\n    return '{{ payload.x }}'"
    config_of(code_node(code=with_braces, input={"x": "{{ payload.x }}"}))  # the code's braces are text
    error = first_error(code_node(input="{{ payload. }}"))
    assert error["path"].startswith("nodes[0].input"), error


def test_an_engine_with_code_steps_off_refuses_each_run_code_node_by_path() -> None:
    config = config_of(
        {"id": "a", "type": "mapping", "output": {"n": 1}},
        code_node(id="b"),
        code_node(id="c", language="javascript", code="function main(input) { return 1; }"),
    )
    with pytest.raises(ConfigError) as info:
        refuse_code_steps(config.nodes)
    assert info.value.info.code == "run_code_disabled"
    assert [e["path"] for e in info.value.info.details["errors"]] == ["nodes[1].type", "nodes[2].type"]
    assert "nodes[1].type, nodes[2].type" in info.value.info.message
    assert "AGENTFLOW_RUN_CODE=on" in (info.value.info.solution or "")
    refuse_code_steps(config_of({"id": "a", "type": "mapping", "output": {"n": 1}}).nodes)  # none: fine
