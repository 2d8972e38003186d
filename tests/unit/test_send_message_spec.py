"""The ``send_message`` node's config: each mistake refused at publish naming the node's path,
and what it declares (ports, output)."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ConfigError
from agentflow.core.graph.catalog import describe_kind
from agentflow.core.graph.message_nodes import SendMessageNode, recipient_problem


def message(**fields: Any) -> dict[str, Any]:
    return {"id": "tell", "type": "send_message", "channel": "email", "to": "ana@example.com",
            "body": "Hello", **fields}  # fmt: skip


def first_error(*nodes: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        validate_config({"name": "m", "kind": "structured", "nodes": list(nodes)})
    errors: list[dict[str, str]] = info.value.info.details["errors"]
    return errors[0]


@pytest.mark.parametrize(
    ("node", "path", "words"),
    [
        (message(channel="sms"), "nodes[0].channel", "'email', 'slack', 'in_app' or 'webhook'"),
        ({k: v for k, v in message().items() if k != "body"}, "nodes[0].body", "Field required"),
        (message(body=""), "nodes[0].body", "at least 1 character"),
        ({k: v for k, v in message().items() if k != "to"}, "nodes[0].to", "Field required"),
        (message(to="not-an-address"), "nodes[0]", "'not-an-address' is not an email address"),
        (message(channel="webhook", to="ftp://x.example.com"), "nodes[0]", "must be http or https"),
        (message(channel="slack", to="hooks.slack.com/x"), "nodes[0]", "a Slack incoming webhook URL"),
        (message(body="{{ payload. }}"), "nodes[0].body", "template"),
    ],
)
def test_mistakes_are_refused_at_publish_naming_the_path(node: dict[str, Any], path: str, words: str) -> None:
    error = first_error(
        message(id="first", channel="in_app", to="ops", next="second"), {**node, "id": "second"}
    )
    assert error["path"].replace("nodes[1]", "nodes[0]").startswith(path), error
    assert words in error["message"], error


def test_a_templated_recipient_is_left_for_the_step_and_the_output_is_declared() -> None:
    config = validate_config({"name": "m", "kind": "structured",
                              "nodes": [message(to="{{ payload.email }}", subject="Hi {{ payload.name }}")]})  # fmt: skip
    assert isinstance(config, StructuredConfig)
    node = config.node("tell")
    assert isinstance(node, SendMessageNode) and node.channel == "email"
    kind = describe_kind(SendMessageNode)
    assert kind["kind"] == "send_message" and kind["ports"] == ["result", "error"]
    assert kind["output_schemas"]["result"]["required"] == ["notification_id", "channel", "recipient"]


@pytest.mark.parametrize(
    ("channel", "to", "ok"),
    [
        ("email", "ana@example.com", True),
        ("email", "ana@example", False),
        ("slack", "https://hooks.slack.com/services/T/B/x", True),
        ("webhook", "http://127.0.0.1:8080/hook", True),
        ("webhook", "mailto:ana@example.com", False),
        ("in_app", "ops-team", True),
        ("in_app", "  ", False),
    ],
)
def test_recipient_problem(channel: str, to: str, ok: bool) -> None:
    assert (recipient_problem(channel, to) is None) is ok
