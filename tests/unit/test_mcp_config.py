"""``mcp_servers`` and the ``mcp_tool`` node at publish: shapes, names and references, each
refused with the path to fix; and the pure naming rules of the tools models are offered."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.agent.mcp_tools import _parameters
from agentflow.core.config_validation import config_document, content_hash, validate_config
from agentflow.core.errors import ConfigError
from agentflow.core.graph.agent_nodes import AgentNode
from agentflow.core.graph.mcp_nodes import McpToolNode
from agentflow.core.mcp import McpServer, offered_name, split_offered
from agentflow.integrations.mcp_client import McpTool, schema_problems

STDIO = {"name": "srv", "command": ["python", "server.py"]}
HTTP = {"name": "web", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer t"}}


def agent(**extra: Any) -> dict[str, Any]:
    return {"name": "a", "kind": "agent", "prompt": "Help.", **extra}


def graph(*nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "g", "kind": "structured", "nodes": list(nodes), **extra}


def errors_of(config: dict[str, Any]) -> list[dict[str, str]]:
    with pytest.raises(ConfigError) as info:
        validate_config(config)
    assert info.value.code == "config_invalid"
    return list(info.value.info.details["errors"])


def test_stdio_and_http_servers_are_accepted_with_their_defaults() -> None:
    config = validate_config(agent(mcp_servers=[STDIO, {**HTTP, "timeout": "90s", "tools": ["search"]}]))
    srv, web = config.mcp_servers or []
    assert (srv.transport, srv.timeout.total_seconds(), srv.tools) == ("stdio", 30.0, None)
    assert (web.transport, web.timeout.total_seconds()) == ("http", 90.0)
    assert web.offers("search") and not web.offers("delete")
    assert srv.where() == "command 'python'"
    assert web.where() == "url https://mcp.example.com/mcp", "headers and query never appear in messages"
    assert config.mcp_server("web") is web and config.mcp_server("nope") is None


def test_a_config_without_servers_keeps_its_document_and_hash() -> None:
    doc = config_document(validate_config(agent()))
    assert "mcp_servers" not in doc
    assert content_hash(doc) == content_hash(config_document(validate_config(agent())))


@pytest.mark.parametrize(
    ("server", "path", "words"),
    [
        ({"name": "x", "command": ["a"], "url": "https://h/mcp"}, "mcp_servers[0]", "exactly one of"),
        ({"name": "x"}, "mcp_servers[0]", "exactly one of"),
        ({"name": "x", "command": []}, "mcp_servers[0].command", "at least 1 item"),
        ({"name": "x", "command": [" "]}, "mcp_servers[0].command", "program to start"),
        ({"name": "a__b", "command": ["a"]}, "mcp_servers[0].name", "'__'"),
        ({"name": "a_", "command": ["a"]}, "mcp_servers[0].name", "end with '_'"),
        ({"name": "has space", "command": ["a"]}, "mcp_servers[0].name", "should match pattern"),
        ({"name": "x" * 31, "command": ["a"]}, "mcp_servers[0].name", "should match pattern"),
        ({"name": "x", "url": "ftp://h/mcp"}, "mcp_servers[0].url", "http:// or https://"),
        ({"name": "x", "url": "https://u:p@h/mcp"}, "mcp_servers[0].url", "credentials in headers"),
        ({"name": "x", "url": "https://h:99999/"}, "mcp_servers[0].url", "not a URL"),
        (
            {"name": "x", "command": ["a"], "headers": {"A": "b"}},
            "mcp_servers[0]",
            "'headers' goes with 'url'",
        ),
        (
            {"name": "x", "url": "https://h/", "env": {"A": "b"}},
            "mcp_servers[0]",
            "'env' goes with 'command'",
        ),
        (
            {"name": "x", "url": "https://h/", "headers": {"Bad Name": "v"}},
            "mcp_servers[0].headers",
            "header name",
        ),
        (
            {"name": "x", "url": "https://h/", "headers": {"A": "a\r\nB: c"}},
            "mcp_servers[0].headers",
            "one line",
        ),
        ({"name": "x", "command": ["a"], "env": {"1X": "v"}}, "mcp_servers[0].env", "environment variable"),
        ({"name": "x", "command": ["a"], "timeout": "0s"}, "mcp_servers[0].timeout", "more than 0"),
        ({"name": "x", "command": ["a"], "timeout": "2h"}, "mcp_servers[0].timeout", "at most 1h"),
        ({"name": "x", "command": ["a"], "tools": ["t", "t"]}, "mcp_servers[0].tools", "more than once"),
        ({"name": "x", "command": ["a"], "extra": 1}, "mcp_servers[0].extra", "Extra inputs"),
        ({"name": "x", "command": ["a", "b\0c"]}, "mcp_servers[0].command", "without NUL"),
        ({"name": "x", "command": ["a"], "env": {"K": "v" * 10_001}}, "mcp_servers[0].env", "at most 10000"),
        ({"name": "x", "command": ["a"], "tools": [""]}, "mcp_servers[0].tools", "1 to 128 characters"),
        ({"name": "x", "command": None, "url": None}, "mcp_servers[0]", "exactly one of"),
    ],
)
def test_a_bad_server_is_refused_at_publish_with_its_path(
    server: dict[str, Any], path: str, words: str
) -> None:
    (error,) = errors_of(agent(mcp_servers=[server]))
    assert error["path"] == path and words in error["message"], error


def test_two_servers_with_one_name_are_refused() -> None:
    (error,) = errors_of(agent(mcp_servers=[STDIO, {**HTTP, "name": "srv"}]))
    assert error["path"] == "mcp_servers" and "['srv']" in error["message"]


def test_an_agents_own_tool_may_not_pose_as_a_servers_tool() -> None:
    tool = {"name": "srv__add", "url": "https://api.example.com/add"}
    (error,) = errors_of(agent(mcp_servers=[STDIO], http_tools=[tool]))
    assert "['srv__add']" in error["message"] and "MCP server" in error["message"]
    assert validate_config(agent(http_tools=[tool])), "without that server the name is just a name"


def test_approvals_may_name_a_servers_tool() -> None:
    config = validate_config(agent(mcp_servers=[STDIO], approvals=["srv__add"]))
    assert config.approvals == ["srv__add"]


def test_an_mcp_tool_node_must_name_a_declared_server_and_an_allowed_tool() -> None:
    call = {
        "id": "call",
        "type": "mcp_tool",
        "server": "srv",
        "tool": "add",
        "args": {"a": "{{ payload.a }}"},
    }
    config = validate_config(graph(call, mcp_servers=[STDIO]))
    node = config.node("call")
    assert isinstance(node, McpToolNode) and node.args == {"a": "{{ payload.a }}"}
    (error,) = errors_of(graph(call))
    assert error == {"path": "nodes[0].server", "message": "'srv' is not one of mcp_servers "
                     "(the workflow has no mcp_servers)"}  # fmt: skip
    (error,) = errors_of(graph({**call, "server": "other"}, mcp_servers=[STDIO, HTTP]))
    assert error["path"] == "nodes[0].server" and "declared: srv, web" in error["message"]
    (error,) = errors_of(graph(call, mcp_servers=[{**STDIO, "tools": ["echo"]}]))
    assert error == {"path": "nodes[0].tool", "message": "'add' is not in the tools of MCP server 'srv'"}
    (error,) = errors_of(graph({**call, "args": {"a": "{{ payload. }}"}}, mcp_servers=[STDIO]))
    assert error["path"].startswith("nodes[0].args"), error
    (error,) = errors_of(graph({**call, "tool": ""}, mcp_servers=[STDIO]))
    assert error["path"] == "nodes[0].tool"


def test_a_stored_version_is_not_refused_for_a_rule_of_publish() -> None:
    call = {"id": "call", "type": "mcp_tool", "server": "gone", "tool": "add"}
    assert validate_config(graph(call), stored=True).node("call")


def test_an_agent_node_takes_servers_and_hands_them_to_its_agent() -> None:
    node = {"id": "helper", "type": "agent", "prompt": "Help.", "mcp_servers": [STDIO]}
    config = validate_config(graph(node))
    helper = config.node("helper")
    assert isinstance(helper, AgentNode)
    assert helper.agent_config("g", "Help.", config).mcp_servers == [McpServer.model_validate(STDIO)]
    (error,) = errors_of(graph({**node, "mcp_servers": [{"name": "x"}]}))
    assert error["path"] == "nodes[0].mcp_servers[0]" and "exactly one of" in error["message"]


def test_tool_names_for_models_join_server_and_tool_within_the_vendor_rules() -> None:
    assert offered_name("srv", "add") == "srv__add"
    assert offered_name("srv", "files.read") is None, "a dot is not a model tool name"
    assert offered_name("s" * 30, "t" * 32) == "s" * 30 + "__" + "t" * 32
    assert offered_name("s" * 30, "t" * 33) is None, "65 characters"
    assert split_offered("srv__add") == ("srv", "add")
    assert split_offered("srv__do__it") == ("srv", "do__it")
    assert split_offered("create_task") is None and split_offered("__x") is None


def test_a_tools_schema_is_offered_as_an_object_without_a_title() -> None:
    tool = McpTool("add", "Add.", {"title": "addArguments", "type": "object", "properties": {"a": {}}})
    assert _parameters(tool) == {"type": "object", "properties": {"a": {}}}
    assert _parameters(McpTool("x", "", {})) == {"type": "object", "properties": {}}


def test_arguments_are_checked_against_the_servers_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert schema_problems(schema, {"a": 1}) == []
    assert schema_problems(schema, {"a": "x"}) == ["a: 'x' is not of type 'integer'"]
    assert schema_problems(schema, {}) == ["(arguments): 'a' is a required property"]
    assert schema_problems({"type": 12}, {"a": 1}) == [], "a broken schema is left to the server"
