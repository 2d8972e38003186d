"""The ``http_request`` node end to end: the real worker sends through its guarded HTTP client to a
real local server, which only the allow-list opens (``127.0.0.1:<its port>``, nothing else)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import parse_qs
from uuid import UUID

import pytest

from agentflow.core.records import RunRecord, StepRecord
from agentflow.engine import Engine
from agentflow.integrations.guarded_http import MiB
from agentflow.runtime.worker import Worker
from tests.conftest import make_settings
from tests.support.scripted_http import ScriptedServer, json_reply
from tests.support.target_server import Reply

FAST_RETRY = {"max_attempts": 3, "initial_delay": "100ms", "jitter": 0}
CLIENT_LIMIT = 10 * MiB  # the worker's guarded client's response size limit


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


@pytest.fixture
async def engine(database_url: str, server: ScriptedServer) -> AsyncIterator[Engine]:
    """The engine (and so the ``worker`` fixture's worker) with only the server's port open."""
    settings = make_settings(database_url, http_allow=f"127.0.0.1:{server.port}")
    eng = await Engine.connect(settings, migrate_schema=False)
    yield eng
    await eng.close()


def flow(name: str, *nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "nodes": list(nodes), **extra}


def http(node_id: str, url: str, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "type": "http_request", "url": url, **extra}


async def finished(engine: Engine, config: dict[str, Any], payload: Any = None) -> RunRecord:
    await engine.publish_workflow(config)
    run = await engine.start_run(config["name"], payload)
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status.is_terminal, (done.status, done.status_reason, done.error)
    return done


async def steps_of(engine: Engine, run_id: UUID, node_id: str) -> list[StepRecord]:
    return [s for s in await engine.list_steps(run_id) if s.node_id == node_id]


async def test_a_get_sends_the_rendered_query_and_headers_and_passes_on_the_parsed_answer(
    engine: Engine, worker: Worker, server: ScriptedServer
) -> None:
    server.script("/items", json_reply({"rows": [{"id": 1}, {"id": 2}]}, headers={"X-Total": "2"}))
    config = flow(
        "list-items",
        http("fetch", f"{server.url}/items?fixed=yes",
             query={"q": "{{ payload.q }}", "page": 2, "tags": ["a", "{{ payload.tag }}"],
                    "cursor": "{{ payload.cursor | default(none) }}"},
             headers={"X-Customer": "{{ payload.customer }}", "Authorization": "Bearer {{ payload.token }}"}),
        {"id": "done", "type": "finish",
         "output": {"status": "{{ input.status }}", "ids": "{{ input.body.rows | map(attribute='id') | list }}",
                    "total": "{{ input.headers['x-total'] }}"}},
    )  # fmt: skip
    payload = {"q": "red shoes", "tag": "b", "customer": "acme", "token": "s3cret"}
    done = await finished(engine, config, payload)
    assert done.status == "completed", done.error
    assert done.output == {"status": 200, "ids": [1, 2], "total": "2"}
    [sent] = server.requests("/items")
    assert sent.method == "GET"
    assert sent.query == {"fixed": ["yes"], "q": ["red shoes"], "page": ["2"], "tags": ["a", "b"]}
    assert (sent.header("X-Customer"), sent.header("Authorization")) == ("acme", "Bearer s3cret")
    [step] = await steps_of(engine, done.id, "fetch")
    assert sent.header("Idempotency-Key") == step.idempotency_key == f"{done.id}:{step.seq}"
    assert step.kind == "http_request" and step.name == f"GET {server.url}"
    assert step.input["headers"]["Authorization"] == "[redacted]", "a secret is not stored with the step"
    assert "s3cret" not in json.dumps(step.input)
    assert step.input["query"] == {"q": "red shoes", "page": "2", "tags": ["a", "b"]}
    assert step.output["headers"]["content-type"] == "application/json"


async def test_a_post_retried_after_a_503_carries_the_same_idempotency_key_both_times(
    engine: Engine, worker: Worker, server: ScriptedServer
) -> None:
    server.script("/orders", Reply(503, body=b"busy, try later"), json_reply({"id": 7}, status=201))
    config = flow(
        "place-order",
        http("order", f"{server.url}/orders", method="POST", retry=FAST_RETRY,
             json={"sku": "{{ payload.sku }}", "qty": "{{ payload.qty }}", "tags": ["new"]}),
        {"id": "done", "type": "finish", "output": "{{ input.body.id }}"},
    )  # fmt: skip
    done = await finished(engine, config, {"sku": "A-1", "qty": 2})
    assert done.status == "completed", done.error
    assert done.output == 7
    first, second = server.requests("/orders")
    assert first.json() == second.json() == {"sku": "A-1", "qty": 2, "tags": ["new"]}
    assert first.header("Content-Type") == "application/json"
    failed, succeeded = await steps_of(engine, done.id, "order")
    key = f"{done.id}:{failed.seq}"
    assert first.header("Idempotency-Key") == second.header("Idempotency-Key") == key
    assert failed.idempotency_key == succeeded.idempotency_key == key
    assert (failed.status, failed.attempt, succeeded.status, succeeded.attempt) == (
        "failed",
        1,
        "completed",
        2,
    )
    assert failed.error is not None and failed.error["code"] == "http_status"
    assert failed.error["details"]["status"] == 503 and failed.error["details"]["body"] == "busy, try later"
    assert f"POST {server.url} answered 503" in failed.error["message"]
    assert succeeded.output["status"] == 201


async def test_a_404_goes_down_the_error_port_at_once(
    engine: Engine, worker: Worker, server: ScriptedServer
) -> None:
    server.script("/customers/42", json_reply({"error": "no such customer"}, status=404))
    config = flow(
        "lookup-customer",
        http("lookup", server.url + "/customers/{{ payload.id }}", retry=FAST_RETRY),
        {"id": "found", "type": "finish", "output": "{{ input.body }}"},
        {"id": "missing", "type": "finish",
         "output": {"code": "{{ input.code }}", "status": "{{ input.details.status }}",
                    "body": "{{ input.details.body }}"}},
        edges=[{"from": "lookup", "to": "found"}, {"from": "lookup", "port": "error", "to": "missing"}],
    )  # fmt: skip
    done = await finished(engine, config, {"id": 42})
    assert done.status == "completed", done.error
    assert done.output == {"code": "http_status", "status": 404, "body": '{"error": "no such customer"}'}
    assert len(server.requests("/customers/42")) == 1, "a 404 is not retried"
    [step] = await steps_of(engine, done.id, "lookup")
    assert step.name == "GET" and step.status == "failed"


async def test_a_429_is_retried_and_its_retry_after_is_recorded(
    engine: Engine, worker: Worker, server: ScriptedServer
) -> None:
    server.script(
        "/limited", Reply(429, headers={"Retry-After": "1"}, body=b"slow down"), json_reply({"ok": True})
    )
    config = flow("rate-limited", http("call", f"{server.url}/limited", retry=FAST_RETRY))
    done = await finished(engine, config)
    assert done.status == "completed", done.error
    assert done.output["body"] == {"ok": True}
    assert len(server.requests("/limited")) == 2
    failed, retried = await steps_of(engine, done.id, "call")
    assert failed.error is not None and failed.error["code"] == "http_status"
    assert failed.error["details"]["status"] == 429
    # What the server asked for travels with the error, and the retry waits that long
    # (the node's own policy would have retried after milliseconds).
    assert failed.error["details"]["retry_after"] == 1.0
    assert (retried.started_at - failed.finished_at).total_seconds() >= 0.95
    assert "rate limiting" in failed.error["solution"]


async def test_form_raw_and_bodiless_requests_and_expected_statuses(
    engine: Engine, worker: Worker, server: ScriptedServer
) -> None:
    server.script(
        "/profile", Reply(200, headers={"Content-Type": "text/plain; charset=utf-8"}, body=b"saved")
    )
    server.script("/note", Reply(200, headers={"Content-Type": "application/json"}, body=b"not json"))
    server.script("/gone", Reply(404, body=b""))
    config = flow(
        "bodies",
        http("form", f"{server.url}/profile", method="PUT",
             form={"name": "{{ payload.name }}", "roles": ["admin", "dev"], "admin": True}),
        http("raw", f"{server.url}/note", method="PATCH", body="line 1\n{{ payload.name }}",
             headers={"Content-Type": "text/plain"}),
        http("remove", f"{server.url}/gone", method="DELETE", expect=["2xx", 404], response="text"),
        http("peek", f"{server.url}/profile", method="HEAD"),
        {"id": "done", "type": "finish",
         "output": {"form": "{{ steps.form.body }}", "raw": "{{ steps.raw.body }}",
                    "removed": "{{ steps.remove.status }}", "gone_body": "{{ steps.remove.body }}",
                    "peek": "{{ steps.peek.body }}", "length": "{{ steps.peek.headers['content-length'] }}"}},
    )  # fmt: skip
    done = await finished(engine, config, {"name": "Ann Lee"})
    assert done.status == "completed", done.error
    assert done.output == {
        "form": "saved",
        "raw": "not json",  # auto: a body that says JSON and is not is kept as text
        "removed": 404,
        "gone_body": "",
        "peek": None,
        "length": "5",
    }
    put, head = server.requests("/profile")
    assert (put.method, head.method) == ("PUT", "HEAD")
    assert parse_qs(put.body.decode()) == {"name": ["Ann Lee"], "roles": ["admin", "dev"], "admin": ["true"]}
    assert put.header("Content-Type") == "application/x-www-form-urlencoded"
    [patch] = server.requests("/note")
    assert (patch.method, patch.body, patch.header("Content-Type")) == (
        "PATCH",
        b"line 1\nAnn Lee",
        "text/plain",
    )
    [delete] = server.requests("/gone")
    assert delete.method == "DELETE" and delete.header("Idempotency-Key")
    keys = {r.header("Idempotency-Key") for r in server.requests()}
    assert len(keys) == 4, "each step has its own key"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://127.0.0.1:{other}/admin", "loopback"),  # open only on the server's own port
    ],
)
async def test_a_destination_the_allow_list_does_not_open_fails_at_once_with_destination_blocked(
    engine: Engine, worker: Worker, server: ScriptedServer, url: str, reason: str
) -> None:
    target = url.format(other=server.port + 1 if server.port < 65535 else server.port - 1)
    done = await finished(engine, flow("blocked", http("steal", target, retry=FAST_RETRY)))
    assert done.status == "failed"
    assert done.error is not None and done.error["code"] == "destination_blocked"
    assert "AGENTFLOW_HTTP_ALLOW" in done.error["solution"]
    assert done.error["details"]["node"] == "steal" and done.error["details"]["attempts"] == 1
    assert "/admin" not in done.error["message"] and "meta-data" not in done.error["message"]
    assert done.error["details"]["category"] == reason
    assert server.requests() == []


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "streamed"])
async def test_a_response_larger_than_the_client_limit_fails_with_response_too_large(
    engine: Engine, worker: Worker, server: ScriptedServer, declared: bool
) -> None:
    server.script("/export", Reply(200, body=b"x" * (CLIENT_LIMIT + 1), length=declared))
    done = await finished(engine, flow("too-big", http("export", f"{server.url}/export", retry=FAST_RETRY)))
    assert done.status == "failed"
    assert done.error is not None and done.error["code"] == "response_too_large"
    assert done.error["details"]["limit"] == CLIENT_LIMIT and done.error["details"]["attempts"] == 1
    assert len(server.requests("/export")) == 1, "a body too large is not fetched again"


async def test_a_slow_server_fails_the_attempt_with_http_timeout_within_the_nodes_timeout(
    engine: Engine, worker: Worker, server: ScriptedServer
) -> None:
    server.script("/slow", Reply(200, delay=3.0))
    config = flow("slow", http("wait", f"{server.url}/slow", timeout="1s", retry={"max_attempts": 1}))
    done = await finished(engine, config)
    assert done.status == "failed"
    assert done.error is not None and done.error["code"] == "http_timeout", done.error
    assert "within 0.9s" in done.error["message"]
    [step] = await steps_of(engine, done.id, "wait")
    assert step.duration_ms < 2000


async def test_a_tool_node_calling_http_http_request_sends_the_request_as_the_node_does(
    engine: Engine, worker: Worker, server: ScriptedServer
) -> None:
    server.script("/orders", json_reply({"id": 9}, status=201))
    config = flow(
        "seed-002-tool",
        {"id": "order", "type": "tool", "tool": "http.http_request",
         "args": {"method": "POST", "url": f"{server.url}/orders", "body": {"sku": "{{ payload.sku }}"}}},
        {"id": "done", "type": "finish", "output": "{{ input.body.id }}"},
    )  # fmt: skip
    done = await finished(engine, config, {"sku": "B-2"})
    assert done.status == "completed", done.error
    assert done.output == 9
    [sent] = server.requests("/orders")
    assert sent.method == "POST" and sent.json() == {"sku": "B-2"}
    [step] = await steps_of(engine, done.id, "order")
    assert step.kind == "http_request"
    assert sent.header("Idempotency-Key") == step.idempotency_key == f"{done.id}:{step.seq}"
