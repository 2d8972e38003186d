"""What a config references (``core.references``): declared by each node kind's fields, with
templates (known only when a step runs) left out."""

from __future__ import annotations

from typing import Any

from agentflow.core.config_validation import validate_config
from agentflow.core.references import KINDS, references_of


def graph(*nodes: dict[str, Any], **extra: Any) -> list[str]:
    return references_of(validate_config({"name": "g", "kind": "structured", "nodes": list(nodes), **extra}))


def test_each_kind_names_what_its_fields_declare() -> None:
    assert graph({"id": "t", "type": "tool", "tool": "crm.note"}) == ["tool:crm.note"]
    assert graph({"id": "c", "type": "run_workflow", "workflow": "child"}) == ["workflow:child"]
    assert graph({"id": "e", "type": "run_employee", "employee": "ada", "assignment": "Go."}) == [
        "employee:ada",
        "workflow:ada",
    ]
    assert graph({"id": "h", "type": "http_request", "url": "https://a.example.com", "credential": "k"}) == [
        "credential:k"
    ]
    assert graph({"id": "h", "type": "http_request", "url": "https://a.example.com"}) == []


def test_assignees_name_people_and_roles_but_not_addresses_or_templates() -> None:
    ask = {"id": "a", "type": "user_input", "message": "OK?"}
    assert graph({**ask, "assignees": ["lee", "role:finance", "x@example.com", "{{ payload.who }}"]}) == [
        "person:lee",
        "role:finance",
    ]
    assert graph(ask) == []


def test_agents_name_their_tools_and_the_credentials_they_call_with() -> None:
    server = {"name": "crm", "url": "https://mcp.example.com/mcp", "credential": "crm-token"}
    agent = validate_config(
        {
            "name": "a",
            "kind": "agent",
            "prompt": "Go.",
            "tools": ["crm_lookup"],
            "http_tools": [
                {"name": "o", "method": "GET", "url": "https://a.example.com/o", "credential": "k"},
                {"name": "p", "method": "GET", "url": "https://a.example.com/p"},
            ],
            "mcp_servers": [server, {"name": "open", "url": "https://mcp.example.com/open"}],
        }
    )
    assert references_of(agent) == ["credential:crm-token", "credential:k", "tool:crm_lookup"]
    node = {"id": "n", "type": "agent", "prompt": "Go.", "tools": ["crm_lookup"], "mcp_servers": [server]}
    assert graph(node) == ["credential:crm-token", "tool:crm_lookup"]
    assert graph({"id": "t", "type": "tool", "tool": "x"}, mcp_servers=[server]) == [
        "credential:crm-token",
        "tool:x",
    ]


def test_the_kinds_are_the_apis() -> None:
    assert KINDS == ("credential", "employee", "person", "role", "tool", "workflow")
