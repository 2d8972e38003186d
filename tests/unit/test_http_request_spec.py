"""The ``http_request`` node's config: each mistake refused at publish with its path, and what it
declares (ports, output, accepted statuses)."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.core.config_validation import config_document, validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ConfigError
from agentflow.core.graph.action_nodes import (
    HttpRequestNode,
    is_retryable_status,
    rendered_url_problem,
    status_range,
    url_problem,
)
from agentflow.core.graph.catalog import describe_kind

URL = "https://api.example.com/v1/items"


def request(**fields: Any) -> dict[str, Any]:
    return {"id": "call", "type": "http_request", "url": URL, **fields}


def first_error(*nodes: dict[str, Any], **extra: Any) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        validate_config({"name": "h", "kind": "structured", "nodes": list(nodes), **extra})
    errors: list[dict[str, str]] = info.value.info.details["errors"]
    return errors[0]


def node_of(**fields: Any) -> HttpRequestNode:
    config = validate_config({"name": "h", "kind": "structured", "nodes": [request(**fields)]})
    assert isinstance(config, StructuredConfig)
    node = config.node("call")
    assert isinstance(node, HttpRequestNode)
    return node


@pytest.mark.parametrize(
    ("node", "path", "words"),
    [
        ({"id": "c", "type": "http_request"}, "nodes[0].url", "Field required"),
        (request(url=""), "nodes[0].url", "at least 1 character"),
        (request(url="ftp://files.example.com/a"), "nodes[0].url", "must be http or https, not 'ftp'"),
        (request(url="api.example.com/v1"), "nodes[0].url", "must be http or https, not none"),
        (request(url="https:///v1"), "nodes[0].url", "the URL has no host"),
        (request(url="https://api.example.com/a b"), "nodes[0].url", "must not contain spaces"),
        (request(url="https://api.example.com:99999/"), "nodes[0].url", "cannot be read"),
        (request(url="file://{{ payload.path }}"), "nodes[0].url", "must be http or https, not 'file'"),
        (request(url="{{ payload. }}"), "nodes[0].url", "template"),
        (request(method="TRACE"), "nodes[0].method", "'GET', 'POST', 'PUT', 'PATCH', 'DELETE' or 'HEAD'"),
        (request(method="post"), "nodes[0].method", "'GET', 'POST'"),
        (request(method="POST", json={"a": 1}, form={"a": "1"}), "nodes[0]",
         "at most one of 'json', 'form' or 'body'"),
        (request(method="PUT", form={"a": "1"}, body="x"), "nodes[0]", "at most one of"),
        (request(json={"a": 1}), "nodes[0]", "a GET request carries no body ('json')"),
        (request(method="HEAD", body="x"), "nodes[0]", "a HEAD request carries no body ('body')"),
        (request(headers={"X Bad": "1"}), "nodes[0].headers", "'X Bad' is not a header name"),
        (request(headers={"Host": "internal"}), "nodes[0].headers", "set by the HTTP client"),
        (request(headers={"Transfer-Encoding": "chunked"}), "nodes[0].headers", "set by the HTTP client"),
        (request(headers={"X-Count": 5}), "nodes[0].headers.X-Count", "valid string"),
        (request(headers={"X-A": "{{ payload. }}"}), "nodes[0].headers.X-A", "template"),
        (request(headers={f"X-{n}": "v" for n in range(101)}), "nodes[0].headers", "at most 100 items"),
        (request(query={"a": {"b": 1}}), "nodes[0].query", "'a' must be a text, number, boolean or a list"),
        (request(query={"a": [1, [2]]}), "nodes[0].query", "'a' must be a text"),
        (request(query={"": "x"}), "nodes[0].query", "must not be empty"),
        (request(query={f"q{n}": n for n in range(101)}), "nodes[0].query", "at most 100 items"),
        (request(query={"q": "{{ payload. }}"}), "nodes[0].query.q", "template"),
        (request(method="POST", form={"a": {"b": 1}}), "nodes[0].form", "'a' must be a text"),
        (request(method="POST", json={"a": ["{{ payload. }}"]}), "nodes[0].json.a[0]", "template"),
        (request(method="POST", body="x" * 1_000_001), "nodes[0].body", "at most 1000000 characters"),
        (request(expect=[]), "nodes[0].expect", "at least 1 item"),
        (request(expect=["2xy"]), "nodes[0].expect[0]", "'2xy' is not a status (404), a class (2xx)"),
        (request(expect=[200, 600]), "nodes[0].expect[1]", "600 is not a status"),
        (request(expect=["6xx"]), "nodes[0].expect[0]", "not a status"),
        (request(expect=["300-200"]), "nodes[0].expect[0]", "not a status"),
        (request(expect=[True]), "nodes[0].expect[0]", "True is not a status"),
        (request(expect=[{"from": 200}]), "nodes[0].expect[0]", "not a status"),
        (request(response="xml"), "nodes[0].response", "'auto', 'json' or 'text'"),
        (request(credential="crm api"), "nodes[0].credential", "should match pattern"),
        (request(credential="{{ payload.name }}"), "nodes[0].credential", "should match pattern"),
        (request(timeout="soon"), "nodes[0].timeout", "duration"),
        (request(params={"a": "1"}), "nodes[0].params", "Extra inputs are not permitted"),
    ],
)  # fmt: skip
def test_http_request_config_errors(node: dict[str, Any], path: str, words: str) -> None:
    error = first_error(node)
    assert error["path"] == path and words in error["message"], error


def test_a_full_config_is_kept_with_json_under_its_own_name() -> None:
    fields: dict[str, Any] = {
        "method": "POST",
        "url": "{{ payload.base }}/orders",
        "headers": {"Authorization": "Bearer {{ state.token }}", "Idempotency-Key": "order-{{ payload.id }}"},
        "query": {"dry_run": False, "tags": ["a", "{{ payload.tag }}"]},
        "json": {"sku": "{{ payload.sku }}", "qty": 2},
        "expect": [201, "2xx", "409"],
        "response": "json",
        "timeout": "10s",
    }
    node = node_of(**fields, credential="crm-api")
    assert node.credential == "crm-api"
    assert node.json_body == {"sku": "{{ payload.sku }}", "qty": 2}
    config = validate_config({"name": "h", "kind": "structured", "nodes": [request(**fields)]})
    stored = config_document(config)["nodes"][0]
    assert stored["json"] == fields["json"] and "json_body" not in stored
    assert validate_config(config_document(config)) == config, "the stored document validates to the same"


@pytest.mark.parametrize(
    "url",
    [
        URL,
        "http://localhost:8080/hook",
        "HTTPS://API.EXAMPLE.COM",
        "{{ payload.url }}",
        "https://{{ payload.host }}/v1",
        "{{ payload.scheme }}://api.example.com",
        "https://api.example.com/{% if payload.x %}x{% endif %}",
    ],
)
def test_urls_accepted_at_publish(url: str) -> None:
    assert url_problem(url) is None
    assert node_of(url=url).url == url


def test_a_rendered_url_is_checked_in_full() -> None:
    assert rendered_url_problem("https://api.example.com/v1?q=1") is None
    assert "scheme" in str(rendered_url_problem("mailto:ops@example.com"))
    assert "no host" in str(rendered_url_problem("http://"))
    assert "line breaks" in str(rendered_url_problem("https://a.example.com/\r\nX: 1"))


@pytest.mark.parametrize(
    ("pattern", "bounds"),
    [
        (404, (404, 404)),
        ("404", (404, 404)),
        ("2xx", (200, 299)),
        ("5XX", (500, 599)),
        ("200-204", (200, 204)),
    ],
)
def test_status_patterns(pattern: Any, bounds: tuple[int, int]) -> None:
    assert status_range(pattern) == bounds


def test_expect_decides_which_statuses_succeed() -> None:
    default = node_of()
    assert default.expect == ["2xx"]
    assert [default.accepts(s) for s in (199, 200, 204, 299, 300, 404)] == [
        False,
        True,
        True,
        True,
        False,
        False,
    ]
    widened = node_of(expect=["2xx", 404, "500-502"])
    assert [widened.accepts(s) for s in (201, 404, 405, 500, 502, 503)] == [
        True,
        True,
        False,
        True,
        True,
        False,
    ]


def test_which_statuses_are_worth_retrying() -> None:
    assert [is_retryable_status(s) for s in (400, 401, 404, 408, 409, 422, 429, 500, 503, 599)] == [
        False, False, False, True, False, False, True, True, True, True,
    ]  # fmt: skip


def test_the_output_is_status_headers_and_body_and_text_bodies_are_declared_as_strings() -> None:
    schema = node_of().port_schema("result")
    assert schema["required"] == ["status", "headers", "body"] and schema["additionalProperties"] is False
    assert node_of(response="text").port_schema("result")["properties"]["body"] == {
        "type": ["string", "null"]
    }
    assert node_of().port_schema("error")["required"] == ["code", "message"]
    assert HttpRequestNode.port_names == ("result", "error")


def test_reads_after_it_are_checked_against_its_output() -> None:
    after = {"id": "use", "type": "finish", "output": "{{ input.nope }}"}
    assert first_error(request(next="use"), after) == {
        "path": "nodes[1].output",
        "message": "{{ input.nope }}: direct predecessor 'call' (http_request) cannot produce it on port "
        "'result'; it sends status, headers, body",
    }
    fine = {"id": "use", "type": "finish", "output": "{{ input.status }} {{ input.body.items[0].id }}"}
    validate_config({"name": "h", "kind": "structured", "nodes": [request(next="use"), fine]})
    text_body = {"id": "use", "type": "finish", "output": "{{ input.body.id }}"}
    error = first_error(request(next="use", response="text"), text_body)
    assert error["path"] == "nodes[1].output" and "{{ input.body.id }}" in error["message"]


def test_the_catalog_describes_the_kind() -> None:
    described = describe_kind(HttpRequestNode)
    assert described["kind"] == "http_request" and described["title"] == "HTTP request"
    assert described["ports"] == ["result", "error"]
    properties = described["config_schema"]["properties"]
    assert {"method", "url", "headers", "query", "json", "form", "body", "expect", "response"} <= set(
        properties
    )
    assert "json_body" not in properties
    assert described["output_schemas"]["result"]["required"] == ["status", "headers", "body"]


def tool_call(args: Any, **fields: Any) -> dict[str, Any]:
    """Seed 002's spelling: a ``tool`` node calling the built-in ``http.http_request``."""
    return {"id": "call", "type": "tool", "tool": "http.http_request", "args": args, **fields}


def test_a_tool_node_calling_http_http_request_is_an_http_request_node() -> None:
    retry = {"max_attempts": 2, "initial_delay": "1s"}
    config = validate_config(
        {"name": "h", "kind": "structured", "nodes": [
            tool_call({"method": "POST", "url": URL, "headers": {"X-A": "{{ payload.a }}"},
                       "body": {"sku": "{{ payload.sku }}"}, "expect": ["2xx", 404]}, retry=retry),
            {"id": "done", "type": "finish", "output": "{{ input.status }}"},
        ]}
    )  # fmt: skip
    assert isinstance(config, StructuredConfig)
    node = config.node("call")
    assert isinstance(node, HttpRequestNode)
    assert (node.method, node.url, node.headers) == ("POST", URL, {"X-A": "{{ payload.a }}"})
    assert node.json_body == {"sku": "{{ payload.sku }}"}, "a body that is not a string is sent as JSON"
    assert node.body is None and node.accepts(404)
    assert node.retry is not None and node.retry.max_attempts == 2
    raw = validate_config(
        {
            "name": "h",
            "kind": "structured",
            "nodes": [tool_call({"method": "PUT", "url": URL, "body": "a=1"})],
        }
    )
    assert isinstance(raw, StructuredConfig)
    text = raw.node("call")
    assert isinstance(text, HttpRequestNode) and text.body == "a=1", "a string body stays raw"


@pytest.mark.parametrize(
    ("args", "fields", "path"),
    [
        ({"method": "FETCH", "url": URL}, {}, "nodes[0].args.method"),
        ({"url": "ftp://files.example.com/a"}, {}, "nodes[0].args.url"),
        ({}, {}, "nodes[0].args.url"),
        ({"url": URL, "colour": "red"}, {}, "nodes[0].args.colour"),
        ({"url": URL, "id": "other"}, {}, "nodes[0].args.id"),
        ("https://api.example.com", {}, "nodes[0].args"),
        ({"url": URL}, {"retry": {"max_attempts": "many"}}, "nodes[0].retry.max_attempts"),
    ],
)
def test_a_mistake_in_an_http_http_request_tool_node_is_named_at_its_path(
    args: Any, fields: dict[str, Any], path: str
) -> None:
    assert first_error(tool_call(args, **fields))["path"] == path
