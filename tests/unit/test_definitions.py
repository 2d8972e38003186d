from typing import Any

import pytest

from agentflow.core.config_validation import config_document, content_hash, parse_config_text, validate_config
from agentflow.core.definitions import DEFAULT_MAX_PARALLEL, AgentConfig, StructuredConfig
from agentflow.core.errors import ConfigError
from agentflow.core.node_specs import ToolNode, WaitNode


def structured(*nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "wf", "kind": "structured", "nodes": list(nodes), **extra}


def errors_of(data: Any) -> list[dict[str, str]]:
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    assert info.value.code == "config_invalid"
    return list(info.value.info.details["errors"])


def test_structured_config_parses_nodes_by_type() -> None:
    config = validate_config(
        structured(
            {"id": "a", "type": "tool", "tool": "t", "args": {"x": 1}, "timeout": "10s"},
            {"id": "w", "type": "wait", "duration": "PT1M"},
            {"id": "f", "type": "finish", "output": "{{ steps.a }}"},
        )
    )
    assert isinstance(config, StructuredConfig)
    assert isinstance(config.nodes[0], ToolNode) and config.nodes[0].timeout is not None
    assert isinstance(config.nodes[1], WaitNode) and config.nodes[1].duration.total_seconds() == 60  # type: ignore[union-attr]
    assert config.start_id == "a"
    assert [config.next_id(n) for n in config.nodes] == ["w", "f", None]


def test_agent_config_shape() -> None:
    config = validate_config(
        {
            "name": "get-well",
            "kind": "agent",
            "prompt": "Start a get-well plan for customers predicted to churn",
            "type": "account",
            "sources": [{"type": "email"}, {"type": "ticket"}],
            "actions": {
                "create_tasks": {"enabled": True, "expiry": "7d"},
                "send_notifications": {"enabled": True},
            },
        }
    )
    assert isinstance(config, AgentConfig)
    assert config.actions["create_tasks"].enabled
    assert [s.type for s in config.sources] == ["email", "ticket"]


def test_errors_point_at_each_offending_path() -> None:
    errors = errors_of(
        structured(
            {"id": "a", "type": "tool"},
            {"id": "b", "type": "wait", "duration": "soon"},
            {"id": "c", "type": "teleport"},
            {"id": "d", "type": "tool", "tool": "x", "bogus": 1},
            {"id": "e", "type": "wait", "duration": "1s", "retry": {"max_attempts": 0}},
        )
    )
    paths = {e["path"] for e in errors}
    assert paths == {
        "nodes[0].tool",
        "nodes[1].duration",
        "nodes[2].type",
        "nodes[3].bogus",
        "nodes[4].retry.max_attempts",
    }
    assert any("teleport" in e["message"] for e in errors)
    assert not any(e["message"].startswith("Value error") for e in errors), (
        "pydantic's prefix leaks to people"
    )


def test_top_level_errors() -> None:
    assert {
        e["path"] for e in errors_of({"name": "x", "kind": "structured", "nodes": [], "timeout": "x"})
    } == {
        "nodes",
        "timeout",
    }
    assert errors_of({"name": "x"})[0]["path"] == ""  # no kind: the discriminator is missing
    assert errors_of({"name": "x", "kind": "robot"})
    assert errors_of(["not", "a", "mapping"])[0]["message"] == "the config must be a mapping"
    assert {e["path"] for e in errors_of({"name": "", "kind": "agent"})} == {"name", "prompt"}


def test_graph_errors() -> None:
    missing = errors_of(structured({"id": "a", "type": "finish", "next": "zz"}, start="nope"))
    assert {e["path"] for e in missing} == {"start", "nodes[0].next"}
    dupes = errors_of(structured({"id": "a", "type": "finish"}, {"id": "a", "type": "finish"}))
    assert dupes[0]["path"] == "nodes[1].id"
    cycle = errors_of(
        structured(
            {"id": "a", "type": "tool", "tool": "t", "next": "b"},
            {"id": "b", "type": "tool", "tool": "t", "next": "a"},
        )
    )
    assert "a -> b -> a" in cycle[0]["message"]


def test_wait_needs_exactly_one_of_duration_until() -> None:
    assert errors_of(structured({"id": "w", "type": "wait"}))[0]["path"] == "nodes[0]"
    assert errors_of(structured({"id": "w", "type": "wait", "duration": "1s", "until": "x"}))


def test_yaml_and_json_text_and_syntax_errors() -> None:
    text = "name: y\nkind: structured\nnodes:\n  - {id: a, type: finish}\n"
    assert parse_config_text(text).name == "y"
    assert (
        parse_config_text(
            '{"name": "j", "kind": "structured", "nodes": [{"id": "a", "type": "finish"}]}'
        ).name
        == "j"
    )
    with pytest.raises(ConfigError) as info:
        parse_config_text("name: [unclosed\nkind: x", "bad.yaml")
    assert info.value.code == "config_syntax"
    assert "bad.yaml" in str(info.value) and "line" in str(info.value)


def test_content_hash_ignores_formatting_but_not_content() -> None:
    a = parse_config_text("name: h\nkind: structured\nnodes: [{id: a, type: wait, duration: 60s}]")
    b = parse_config_text(
        '{"kind": "structured", "nodes": [{"type": "wait", "duration": "PT1M", "id": "a"}], "name": "h"}'
    )
    c = parse_config_text("name: h\nkind: structured\nnodes: [{id: a, type: wait, duration: 61s}]")
    assert content_hash(config_document(a)) == content_hash(config_document(b))
    assert content_hash(config_document(a)) != content_hash(config_document(c))


def test_document_round_trips() -> None:
    config = validate_config(
        structured(
            {"id": "a", "type": "tool", "tool": "t", "args": {"k": [1, 2]}, "retry": {"max_attempts": 5}}
        )
    )
    again = validate_config(config_document(config))
    assert config_document(again) == config_document(config)
    assert isinstance(again, StructuredConfig)
    assert again.nodes[0].retry is not None and again.nodes[0].retry.max_attempts == 5


def test_trigger_config_errors_point_into_the_trigger() -> None:
    errors = errors_of(
        structured(
            {"id": "a", "type": "finish"},
            trigger={
                "topics": [""],
                "conditions": {"all": [{"path": "data.x", "op": "frobnicate", "value": 1}]},
                "debounce": {"seconds": 10, "key": "a..b"},
            },
        )
    )
    by_path = {e["path"]: e["message"] for e in errors}
    assert "trigger.topics" in by_path
    assert "invalid path" in by_path["trigger.debounce.key"], by_path
    assert "conditions.all[0].op" in by_path["trigger.conditions"], by_path
    ok = validate_config(structured({"id": "a", "type": "finish"}, trigger={"topics": ["email.*"]}))
    assert (
        ok.trigger is not None
        and ok.trigger.matches_topic("email.received")
        and not ok.trigger.matches_topic("ticket.x")
    )


def test_max_parallel_is_stored_only_when_set_so_old_configs_keep_their_hash() -> None:
    plain = {"name": "p", "kind": "structured", "nodes": [{"id": "a", "type": "tool", "tool": "echo"}]}
    config = validate_config(plain)
    assert isinstance(config, StructuredConfig)
    assert "max_parallel" not in config_document(config), "re-applying an unchanged config publishes nothing"
    assert config.parallel_limit == DEFAULT_MAX_PARALLEL
    limited = validate_config({**plain, "max_parallel": 2})
    assert isinstance(limited, StructuredConfig)
    assert config_document(limited)["max_parallel"] == 2 and limited.parallel_limit == 2
    with pytest.raises(ConfigError, match="max_parallel"):
        validate_config({**plain, "max_parallel": 0})
