"""The ``http_request`` runner against a fake transport: how it renders and sends, reads answers,
and turns every failure into a stable code (the guarded client itself is tested end to end in
tests/integration/test_http_request_node.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any
from uuid import uuid4

import httpx
import pytest

from agentflow.core.errors import StepFailure
from agentflow.core.graph.action_nodes import HttpRequestNode
from agentflow.core.step_context import StepContext
from agentflow.core.tools import ToolRegistry
from agentflow.integrations.guarded_http import DEADLINE_EXTENSION
from agentflow.integrations.http_errors import BlockedDestination, RequestDeadlineExceeded, ResponseTooLarge
from agentflow.nodes.base import NodeEnv
from agentflow.nodes.http_request import HttpRequestRunner
from agentflow.nodes.threads import ToolThreads

URL = "https://api.example.com/v1/items"
Handler = Callable[[httpx.Request], httpx.Response]
RUNNER = HttpRequestRunner()


def node(**fields: Any) -> HttpRequestNode:
    return HttpRequestNode.model_validate({"id": "call", "type": "http_request", "url": URL, **fields})


def env(handler: Handler | None, **context: Any) -> NodeEnv:
    client = None if handler is None else httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return NodeEnv(ToolRegistry(), ToolThreads(), {"payload": context}, http=client)


CTX = StepContext(uuid4(), uuid4(), uuid4(), step_seq=3, attempt=1, fencing_token=1, payload={})


async def run(spec: HttpRequestNode, handler: Handler | None, **context: Any) -> tuple[Any, dict[str, Any]]:
    step_input, result = await RUNNER.run(spec, CTX, env(handler, **context))
    return step_input, result.output


async def failure(spec: HttpRequestNode, handler: Handler | None, **context: Any) -> StepFailure:
    with pytest.raises(StepFailure) as info:
        await run(spec, handler, **context)
    return info.value


def answer(status: int = 200, **kwargs: Any) -> Handler:
    return lambda request: httpx.Response(status, **kwargs)


def raising(exc: Exception) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return handler


async def test_the_request_is_rendered_and_sent_with_the_steps_idempotency_key() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json={"id": 1})

    spec = node(
        method="POST",
        url="https://api.example.com/{{ payload.path }}?keep=1&page=1",
        headers={"X-Api-Key": "{{ payload.key }}", "X-Empty": "{{ payload.none }}", "X-N": "{{ payload.n }}"},
        query={"page": "{{ payload.n }}", "flag": True, "drop": "{{ payload.none }}", "many": [1, None, 2]},
        json={"who": "{{ payload.who }}", "n": "{{ payload.n }}"},
    )
    logged, output = await run(spec, handler, path="orders", key="k-1", none=None, n=2, who={"a": 1})
    [sent] = seen
    assert str(sent.url) == "https://api.example.com/orders?keep=1&page=2&flag=true&many=1&many=2"
    assert sent.headers["Idempotency-Key"] == f"{CTX.run_id}:3"
    assert sent.headers["X-Api-Key"] == "k-1" and sent.headers["X-N"] == "2" and "X-Empty" not in sent.headers
    assert sent.headers["Content-Type"] == "application/json"
    assert json.loads(sent.content) == {"who": {"a": 1}, "n": 2}
    assert output == {"status": 201, "headers": {"content-length": "8", "content-type": "application/json"},
                      "body": {"id": 1}}  # fmt: skip
    assert logged["headers"]["X-Api-Key"] == "[redacted]" and logged["json"] == {"who": {"a": 1}, "n": 2}
    assert logged["query"] == {"page": "2", "flag": "true", "many": ["1", "2"]}


async def test_a_key_and_a_content_type_of_the_workflow_are_kept() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text="ok")

    spec = node(
        method="PUT",
        headers={"idempotency-key": "mine", "content-type": "application/vnd.api+json"},
        json=[1, 2],
    )
    await run(spec, handler)
    assert seen[0].headers.get_list("idempotency-key") == ["mine"]
    assert seen[0].headers.get_list("content-type") == ["application/vnd.api+json"]


async def test_a_raw_body_that_renders_to_a_value_is_sent_as_json() -> None:
    seen: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        return httpx.Response(204)

    _, output = await run(node(method="POST", body="{{ payload.doc }}"), handler, doc={"a": [1]})
    assert seen == [b'{"a":[1]}'] and output["body"] is None


async def test_the_nodes_timeout_bounds_the_exchange() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    before = asyncio.get_running_loop().time()
    await run(node(timeout="10s"), handler)
    assert seen[0].extensions["timeout"]["read"] == 9.0
    assert before + 8.9 < seen[0].extensions[DEADLINE_EXTENSION] < before + 10
    await run(node(), handler)
    assert DEADLINE_EXTENSION not in seen[1].extensions, "the client's own deadline applies"


@pytest.mark.parametrize(
    ("mode", "headers", "content", "body"),
    [
        ("auto", {"Content-Type": "application/problem+json"}, b'{"a": 1}', {"a": 1}),
        ("auto", {"Content-Type": "application/json"}, b"not json", "not json"),
        ("auto", {"Content-Type": "application/json"}, b"", None),
        ("auto", {}, b"", None),
        ("text", {}, b"", ""),
        ("auto", {"Content-Type": "text/csv"}, b"a,b\n1,2", "a,b\n1,2"),
        ("auto", {}, b"plain\x00text", "plain\ufffdtext"),
        ("json", {"Content-Type": "text/plain"}, b"[1, 2]", [1, 2]),
        ("json", {}, b"", None),
        ("text", {"Content-Type": "application/json"}, b'{"a": 1}', '{"a": 1}'),
    ],
)
async def test_bodies_are_read_as_the_response_field_says(
    mode: str, headers: dict[str, str], content: bytes, body: Any
) -> None:
    _, output = await run(node(response=mode), answer(200, headers=headers, content=content))
    assert output["body"] == body


async def test_a_json_answer_that_is_not_json_fails_when_json_was_required() -> None:
    failed = await failure(node(response="json"), answer(200, content=b"<html>oops</html>"))
    assert (failed.info.code, failed.retryable) == ("http_response_not_json", False)
    assert failed.info.details["body"] == "<html>oops</html>"


async def test_a_head_request_has_no_body() -> None:
    _, output = await run(node(method="HEAD"), answer(200, headers={"Content-Length": "10"}))
    assert output["body"] is None and output["headers"]["content-length"] == "10"


@pytest.mark.parametrize(
    ("status", "headers", "retryable", "retry_after", "solution"),
    [
        (400, {}, False, None, "add it to 'expect'"),
        (404, {"Retry-After": "5"}, False, None, "connect the node's 'error' port"),
        (408, {}, True, None, "retried by its retry policy"),
        (429, {"Retry-After": "7"}, True, 7.0, "rate limiting"),
        (503, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, True, 0.0, "retried by its retry policy"),
        (500, {"Retry-After": "soon"}, True, None, "retried"),
    ],
)
async def test_an_unexpected_status_fails_with_http_status(
    status: int, headers: dict[str, str], retryable: bool, retry_after: float | None, solution: str
) -> None:
    failed = await failure(node(url="https://api.example.com/secret-path?token=t"), answer(status, headers=headers,
                                                                                          text="x" * 5000))  # fmt: skip
    assert (failed.info.code, failed.retryable) == ("http_status", retryable)
    assert failed.info.details["status"] == status and len(failed.info.details["body"]) == 1000
    assert failed.info.details.get("retry_after") == retry_after
    assert solution in str(failed.info.solution)
    assert "secret-path" not in str(failed) and "token" not in str(failed), "only the origin is shown"
    assert f"GET https://api.example.com answered {status}" in str(failed)


@pytest.mark.parametrize(
    ("exc", "code", "retryable"),
    [
        (httpx.ConnectError("refused"), "http_connect_failed", True),
        (httpx.ReadTimeout("slow"), "http_timeout", True),
        (httpx.TooManyRedirects("loop"), "http_too_many_redirects", False),
        (httpx.DecodingError("bad gzip"), "http_bad_response", False),
        (httpx.RemoteProtocolError("torn"), "http_failed", True),
        (httpx.UnsupportedProtocol("gopher"), "http_url_invalid", False),
        (BlockedDestination("refused 10.0.0.1", details={"host": "10.0.0.1"}), "destination_blocked", False),
        (ResponseTooLarge(httpx.URL(URL), 100), "response_too_large", False),
        (RequestDeadlineExceeded(httpx.URL(URL), 30.0), "http_timeout", True),
    ],
)
async def test_transport_failures_get_stable_codes(exc: Exception, code: str, retryable: bool) -> None:
    failed = await failure(node(), raising(exc))
    assert (failed.info.code, failed.retryable) == (code, retryable)
    assert failed.info.details["node"] == "call" and failed.info.solution
    assert "node 'call'" in str(failed)


async def test_a_timeout_names_the_limit_that_applied() -> None:
    failed = await failure(node(), raising(RequestDeadlineExceeded(httpx.URL(URL), 30.0)))
    assert "did not answer within 30s" in str(failed)
    failed = await failure(node(timeout="5s"), raising(httpx.ReadTimeout("slow")))
    assert "did not answer within 4.5s" in str(failed) and failed.info.details["timeout"] == 4.5
    failed = await failure(node(), raising(httpx.ReadTimeout("slow")))
    assert "did not answer in time" in str(failed)


async def test_a_bug_in_the_transport_is_not_disguised() -> None:
    with pytest.raises(RuntimeError, match="bug"):
        await run(node(), raising(RuntimeError("bug")))


@pytest.mark.parametrize(
    ("fields", "context", "code", "words"),
    [
        ({"url": "{{ payload.url }}"}, {"url": "ftp://x.example.com"}, "http_url_invalid", "http or https"),
        ({"url": "{{ payload.url }}"}, {"url": 42}, "http_url_invalid", "it gave int"),
        (
            {"headers": {"X-A": "{{ payload.v }}"}},
            {"v": "a\r\nX-Evil: 1"},
            "http_header_invalid",
            "line break",
        ),
        ({"method": "POST", "json": "{{ payload.v }}"}, {"v": float("nan")}, "http_body_invalid", "not JSON"),
    ],
)
async def test_what_renders_unusable_fails_without_a_request(
    fields: dict[str, Any], context: dict[str, Any], code: str, words: str
) -> None:
    failed = await failure(node(**fields), raising(AssertionError("no request expected")), **context)
    assert (failed.info.code, failed.retryable) == (code, False) and words in str(failed)


async def test_a_worker_without_a_client_says_so() -> None:
    failed = await failure(node(), None)
    assert (failed.info.code, failed.retryable) == ("http_unavailable", False)


def test_the_step_is_named_by_method_and_origin() -> None:
    assert RUNNER.describe(node(method="DELETE", url="https://api.example.com:8443/x?t=1")) == (
        "DELETE https://api.example.com:8443"
    )
    assert RUNNER.describe(node(url="{{ payload.url }}")) == "GET"
    assert RUNNER.timeout_override(node(), env(None)) is None


async def test_a_form_is_url_encoded_with_repeated_names() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    spec = node(method="POST", form={"q": "{{ payload.q }}", "ids": [1, 2], "meta": "{{ payload.meta }}"})
    logged, _ = await run(spec, handler, q="a b", meta={"k": "v"})
    assert seen[0].content == b"q=a+b&ids=1&ids=2&meta=%7B%22k%22%3A%22v%22%7D"
    assert seen[0].headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert logged["form"] == {"q": "a b", "ids": ["1", "2"], "meta": '{"k":"v"}'}
