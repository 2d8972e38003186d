"""The ``llm`` node's config: mistakes refused at publish with their path; its output declared."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ConfigError
from agentflow.core.graph.catalog import describe_kind
from agentflow.core.graph.model_nodes import LlmNode

TRIAGE = {
    "type": "object",
    "properties": {"priority": {"type": "string", "enum": ["low", "high"]}},
    "additionalProperties": False,
}


def errors_of(*nodes: dict[str, Any]) -> list[dict[str, str]]:
    with pytest.raises(ConfigError) as info:
        validate_config({"name": "l", "kind": "structured", "nodes": list(nodes)})
    found: list[dict[str, str]] = info.value.info.details["errors"]
    return found


@pytest.mark.parametrize(
    ("node", "path", "words"),
    [
        ({"id": "l", "type": "llm"}, "nodes[0]", "needs 'prompt' or 'messages'"),
        ({"id": "l", "type": "llm", "prompt": "hi", "messages": [{"role": "user", "content": "x"}]},
         "nodes[0]", "not both"),
        ({"id": "l", "type": "llm", "system": "be brief", "messages": [{"role": "user", "content": "x"}]},
         "nodes[0]", "not both"),
        ({"id": "l", "type": "llm", "messages": [{"role": "system", "content": "x"}]},
         "nodes[0]", "at least one 'user' message"),
        ({"id": "l", "type": "llm", "messages": [{"role": "tool", "content": "x"}]},
         "nodes[0].messages[0].role", "'system', 'user' or 'assistant'"),
        ({"id": "l", "type": "llm", "messages": []}, "nodes[0].messages", "at least 1 item"),
        ({"id": "l", "type": "llm", "prompt": "hi", "output_schema": {"type": "nope"}},
         "nodes[0].output_schema", "not a valid JSON Schema"),
        ({"id": "l", "type": "llm", "prompt": "hi", "output_schema": {"type": "array"}},
         "nodes[0].output_schema", "type 'object' at the top"),
        ({"id": "l", "type": "llm", "prompt": "hi", "temperature": 3}, "nodes[0].temperature", "less than or equal to 2"),
        ({"id": "l", "type": "llm", "prompt": "hi", "top_p": 0}, "nodes[0].top_p", "greater than 0"),
        ({"id": "l", "type": "llm", "prompt": "hi", "max_tokens": 0}, "nodes[0].max_tokens", "greater than or equal to 1"),
        ({"id": "l", "type": "llm", "prompt": "hi", "stop": [""]}, "nodes[0].stop", "1 to 100 characters"),
        ({"id": "l", "type": "llm", "prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}, "nodes[0].stop", "at most 4"),
        ({"id": "l", "type": "llm", "prompt": "hi", "output_retries": 9}, "nodes[0].output_retries", "less than or equal to 5"),
        ({"id": "l", "type": "llm", "prompt": "hi", "model": "openai gpt"}, "nodes[0].model", "pattern"),
        ({"id": "l", "type": "llm", "prompt": "{{ payload. }}"}, "nodes[0].prompt", "template"),
        ({"id": "l", "type": "llm", "messages": [{"role": "user", "content": "{{ x | nope }}"}]},
         "nodes[0].messages[0].content", "nope"),
    ],
)  # fmt: skip
def test_llm_node_config_errors(node: dict[str, Any], path: str, words: str) -> None:
    error = errors_of(node)[0]
    assert error["path"] == path and words in error["message"], error


def test_an_output_schema_is_data_not_a_template() -> None:
    schema = {
        "type": "object",
        "properties": {"x": {"type": "string", "description": "say {{ not a template"}},
    }
    config = validate_config(
        {
            "name": "l",
            "kind": "structured",
            "nodes": [{"id": "l", "type": "llm", "prompt": "hi", "output_schema": schema}],
        }
    )
    assert isinstance(config, StructuredConfig)
    node = config.nodes[0]
    assert isinstance(node, LlmNode) and node.output_schema == schema


def test_the_answer_data_is_checked_against_the_output_schema_at_publish() -> None:
    llm = {"id": "triage", "type": "llm", "prompt": "{{ payload.text }}", "output_schema": TRIAGE}
    ok = validate_config(
        {"name": "l", "kind": "structured",
         "nodes": [llm, {"id": "done", "type": "finish", "output": "{{ input.data.priority }} {{ input.usage.usd_cost }}"}]}
    )  # fmt: skip
    assert isinstance(ok, StructuredConfig)
    errors = errors_of(llm, {"id": "done", "type": "finish", "output": "{{ input.data.urgency }}"})
    assert (
        "input.data.urgency" in errors[0]["message"]
        and "'triage' (llm) cannot produce it" in errors[0]["message"]
    )
    plain = {"id": "triage", "type": "llm", "prompt": "{{ payload.text }}"}
    errors = errors_of(plain, {"id": "done", "type": "finish", "output": "{{ input.data }}"})
    assert "input.data" in errors[0]["message"], "without output_schema there is no data"


def test_the_catalog_describes_the_llm_kind_for_builders() -> None:
    described = describe_kind(LlmNode)
    props = described["config_schema"]["properties"]
    assert {"model", "system", "prompt", "messages", "output_schema", "temperature", "top_p", "max_tokens",
            "stop", "output_retries"} <= set(props)  # fmt: skip
    assert described["ports"] == ["result", "error"]
