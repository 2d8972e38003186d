"""The HTTP API in a real uvicorn server over a real PostgreSQL, through httpx."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.api.app import create_app
from agentflow.engine import Engine
from agentflow.runtime.metrics import REGISTRY
from agentflow.store.database import Database
from tests.conftest import make_settings
from tests.support.http_server import WORKFLOWS, error_code, poll_run, publish, serve, start

ROOT = Path(__file__).resolve().parents[2]


def flow(name: str, *nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "nodes": list(nodes), **extra}


SUM = flow(
    "sum",
    {"id": "a", "type": "tool", "tool": "add", "args": {"a": "{{ payload.x }}", "b": 2}},
    {"id": "b", "type": "tool", "tool": "echo", "args": {"value": "{{ steps.a * 10 }}"}},
    {"id": "done", "type": "finish", "output": {"total": "{{ steps.b.value }}"}},
)
NAP = flow("nap", {"id": "nap", "type": "wait", "duration": "1h"}, {"id": "x", "type": "finish"})
FATAL = flow("fatal", {"id": "x", "type": "tool", "tool": "always_fails", "args": {"retryable": False}})


def internal_errors() -> float:
    return REGISTRY.get_sample_value("agentflow_http_internal_errors_total") or 0.0


@pytest.fixture(autouse=True)
def no_internal_errors(request: pytest.FixtureRequest) -> Iterator[None]:
    """No request of any test here may reach the catch-all 500 (except its own control)."""
    before = internal_errors()
    yield
    if "catch_all" not in request.node.name:
        assert internal_errors() == before, "a request ended in a 500 internal_error"


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base, timeout=60) as c:
        yield c


@pytest.fixture
async def worker(engine: Engine) -> AsyncIterator[None]:
    w = engine.worker(concurrency=4)
    task = asyncio.create_task(w.run())
    yield
    w.stop()
    await asyncio.wait_for(task, 30)


async def test_health_and_readiness(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}


async def test_publish_201_then_200_unchanged_then_version_2(client: httpx.AsyncClient) -> None:
    first = await client.post(WORKFLOWS, json=SUM)
    assert first.status_code == 201
    body = first.json()
    assert body["created"] is True and body["version"] == 1 and len(body["content_hash"]) == 64
    workflow_id = body["workflow"]["id"]
    assert first.headers["location"] == f"{WORKFLOWS}/{workflow_id}/versions/1"

    again = await client.post(WORKFLOWS, json=SUM)
    assert again.status_code == 200
    assert again.json()["created"] is False and again.json()["version"] == 1
    assert again.json()["content_hash"] == body["content_hash"]

    changed = await client.post(WORKFLOWS, json={**SUM, "description": "v2"})
    assert changed.status_code == 201
    assert changed.json()["version"] == 2 and changed.json()["workflow"]["id"] == workflow_id
    assert changed.json()["content_hash"] != body["content_hash"]

    listed = (await client.get(WORKFLOWS)).json()["workflows"]
    assert [(w["name"], w["latest_version"]) for w in listed] == [("sum", 2)]
    for ref in (workflow_id, "sum"):
        detail = (await client.get(f"{WORKFLOWS}/{ref}")).json()
        assert detail["id"] == workflow_id and detail["config"]["description"] == "v2"
        assert detail["content_hash"] == changed.json()["content_hash"]
    v1 = (await client.get(f"{WORKFLOWS}/{workflow_id}/versions/1")).json()
    assert v1["version"] == 1 and "description" not in v1["config"]
    assert (await client.get(f"{WORKFLOWS}/sum/versions/latest")).json()["version"] == 2
    for bad in ("3", "0", "-1", "abc", "1.5", "99999999999", "9" * 10_000):
        response = await client.get(f"{WORKFLOWS}/sum/versions/{bad}")
        assert error_code(response, 404) == "version_not_found", bad


async def test_publish_flags_from_query_and_body(client: httpx.AsyncClient) -> None:
    body = await publish(client, SUM, draft="true")
    assert body["workflow"]["draft"] is True and body["workflow"]["enabled"] is True
    body = await publish(client, {**SUM, "enabled": False, "draft": False})
    assert body["workflow"]["enabled"] is False and body["workflow"]["draft"] is False
    assert body["created"] is False, "flags are not part of the config"
    bad = await client.post(WORKFLOWS, json={**SUM, "enabled": "yes"})
    assert error_code(bad, 422) == "invalid_request"
    assert bad.json()["error"]["details"]["errors"][0]["path"] == "body.enabled"


async def test_invalid_config_lists_every_path(client: httpx.AsyncClient) -> None:
    config = flow("broken", {"id": "a", "type": "nope"}, {"id": "b", "type": "wait", "duration": "soon"})
    response = await client.post(WORKFLOWS, json=config)
    assert error_code(response, 422) == "config_invalid"
    paths = {e["path"] for e in response.json()["error"]["details"]["errors"]}
    assert {"nodes[0].type", "nodes[1].duration"} <= paths
    assert response.json()["error"]["solution"]
    not_object = await client.post(WORKFLOWS, json=[SUM])
    assert error_code(not_object, 422) == "invalid_request"
    assert not_object.json()["error"]["details"]["errors"][0]["path"] == "body"
    assert (await client.get(WORKFLOWS)).json() == {"workflows": []}


async def test_run_completes_with_its_steps(client: httpx.AsyncClient, worker: None) -> None:
    workflow_id = (await publish(client, SUM))["workflow"]["id"]
    response = await client.post(f"{WORKFLOWS}/sum/runs", json={"payload": {"x": 1}})
    assert response.status_code == 201
    run = response.json()
    assert run["workflow_id"] == workflow_id and run["input"] == {"x": 1} and run["workflow_version"] == 1
    assert response.headers["location"] == f"{WORKFLOWS}/{workflow_id}/runs/{run['id']}"
    done = await poll_run(client, workflow_id, run["id"], {"completed", "failed", "canceled"})
    assert done["status"] == "completed" and done["output"] == {"total": 30}
    assert [(s["seq"], s["node_id"], s["status"]) for s in done["steps"]] == [
        (0, "a", "completed"),
        (1, "b", "completed"),
        (2, "done", "completed"),
    ]
    assert done["steps"][0]["output"] == 3 and done["steps"][0]["idempotency_key"] == f"{run['id']}:0"


async def test_list_runs_pages_and_filters(client: httpx.AsyncClient) -> None:
    await publish(client, SUM)
    started = [(await start(client, "sum", {"x": i}))["id"] for i in range(3)]
    page = (await client.get(f"{WORKFLOWS}/sum/runs", params={"limit": 2})).json()
    assert [r["id"] for r in page["runs"]] == started[::-1][:2] and page["next_before"] == started[1]
    rest = (await client.get(f"{WORKFLOWS}/sum/runs", params={"limit": 2, "before": started[1]})).json()
    assert [r["id"] for r in rest["runs"]] == [started[0]] and rest["next_before"] is None
    created = (await client.get(f"{WORKFLOWS}/sum/runs", params={"status": "created"})).json()
    assert len(created["runs"]) == 3
    assert (await client.get(f"{WORKFLOWS}/sum/runs", params={"status": "completed"})).json()["runs"] == []
    for params in ({"status": "bogus"}, {"limit": 0}, {"limit": 501}, {"limit": "9" * 40}, {"before": "x"}):
        response = await client.get(f"{WORKFLOWS}/sum/runs", params=params)
        assert error_code(response, 422) == "invalid_request", params
        assert response.json()["error"]["details"]["errors"][0]["path"].startswith("query.")


async def test_start_options_and_conflicts(client: httpx.AsyncClient) -> None:
    await publish(client, SUM)
    await publish(client, {**SUM, "description": "v2"})
    pinned = await client.post(f"{WORKFLOWS}/sum/runs", json={"payload": {"x": 1}, "version": 1})
    assert pinned.status_code == 201 and pinned.json()["workflow_version"] == 1
    missing = await client.post(f"{WORKFLOWS}/sum/runs", json={"version": 9})
    assert error_code(missing, 404) == "version_not_found"
    keyed = await client.post(f"{WORKFLOWS}/sum/runs", json={"enrollment_key": "acct-1"})
    assert keyed.status_code == 201 and keyed.json()["enrollment_key"] == "acct-1"
    second = await client.post(f"{WORKFLOWS}/sum/runs", json={"enrollment_key": "acct-1"})
    assert error_code(second, 409) == "run_already_active"
    for body, path in (({"bogus": 1}, "body.bogus"), ({"version": 0}, "body.version"), ([], "body")):
        response = await client.post(f"{WORKFLOWS}/sum/runs", json=body)
        assert error_code(response, 422) == "invalid_request", body
        assert response.json()["error"]["details"]["errors"][0]["path"] == path
    await publish(client, {"name": "agent", "kind": "agent", "prompt": "Help the account."})
    agent = await client.post(f"{WORKFLOWS}/agent/runs", json={})
    assert agent.status_code == 201 and agent.json()["state"]["agent"]["phase"] == "decide"


async def test_cancel_a_waiting_run_then_409(client: httpx.AsyncClient, worker: None) -> None:
    await publish(client, NAP)
    run = await start(client, "nap")
    waiting = await poll_run(client, "nap", run["id"], {"waiting"})
    assert waiting["status"] == "waiting"
    canceled = await client.post(f"{WORKFLOWS}/nap/runs/{run['id']}/cancel")
    assert canceled.status_code == 200 and canceled.json()["status"] == "canceled"
    assert (await client.get(f"{WORKFLOWS}/nap/runs/{run['id']}")).json()["status"] == "canceled"
    again = await client.post(f"{WORKFLOWS}/nap/runs/{run['id']}/cancel")
    assert error_code(again, 409) == "run_already_ended"


async def test_retry_only_failed_runs(client: httpx.AsyncClient, worker: None) -> None:
    await publish(client, FATAL)
    await publish(client, NAP)
    nap = await start(client, "nap")
    response = await client.post(f"{WORKFLOWS}/nap/runs/{nap['id']}/retry")
    assert error_code(response, 409) == "run_not_failed"
    run = await start(client, "fatal")
    failed = await poll_run(client, "fatal", run["id"], {"failed", "completed"})
    assert failed["status"] == "failed" and failed["status_reason"] == "upstream_down"
    retried = await client.post(f"{WORKFLOWS}/fatal/runs/{run['id']}/retry")
    assert retried.status_code == 200 and retried.json()["status"] == "in_progress"
    assert retried.json()["status_reason"] == "retried"


async def test_unknown_and_malformed_ids_are_404(client: httpx.AsyncClient) -> None:
    await publish(client, SUM)
    await publish(client, NAP)
    run = await start(client, "sum", {"x": 1})
    huge = "x" * 10_000
    cases = [
        (f"{WORKFLOWS}/{uuid.uuid4()}", "workflow_not_found"),
        (f"{WORKFLOWS}/no-such-flow", "workflow_not_found"),
        (f"{WORKFLOWS}/{huge}", "workflow_not_found"),
        (f"{WORKFLOWS}/{huge}/runs", "workflow_not_found"),
        (f"{WORKFLOWS}/{huge}/versions/1", "workflow_not_found"),
        (f"{WORKFLOWS}/sum/runs/{uuid.uuid4()}", "run_not_found"),
        (f"{WORKFLOWS}/sum/runs/not-a-uuid", "run_not_found"),
        (f"{WORKFLOWS}/sum/runs/{huge}", "run_not_found"),
        (f"{WORKFLOWS}/nap/runs/{run['id']}", "run_not_found"),  # a run of another workflow
        (f"{WORKFLOWS}/{huge}/runs/{run['id']}", "workflow_not_found"),
    ]
    for path, code in cases:
        assert error_code(await client.get(path), 404) == code, path
        if "/runs/" in path:
            for action in ("cancel", "retry"):
                assert error_code(await client.post(f"{path}/{action}"), 404) == code, (path, action)
    # Text no id can hold is refused at the boundary, before any route (test_bad_input.py).
    for path, status, code in (
        (f"{WORKFLOWS}/%00", 400, "unstorable_text"),
        (f"{WORKFLOWS}/%ED%A0%80", 400, "invalid_utf8"),
        (f"{WORKFLOWS}/sum/runs/%00", 400, "unstorable_text"),
    ):
        assert error_code(await client.get(path), status) == code, path
    start_unknown = await client.post(f"{WORKFLOWS}/{uuid.uuid4()}/runs", json={})
    assert error_code(start_unknown, 404) == "workflow_not_found"
    assert error_code(await client.get("/api/ai/nothing"), 404) == "not_found"
    assert error_code(await client.delete(WORKFLOWS), 405) == "method_not_allowed"
    # A path served by two routes (GET and PUT) names both methods.
    refused = await client.delete("/api/accounts/acct-1")
    assert error_code(refused, 405) == "method_not_allowed" and refused.headers["allow"] == "GET, PUT"
    # Where templates overlap, the path's own route: /plan is not a document id.
    refused = await client.put("/api/knowledge/plan")
    assert error_code(refused, 405) == "method_not_allowed" and refused.headers["allow"] == "GET"
    assert (await client.get(f"{WORKFLOWS}/sum/runs/{run['id']}")).json()["status"] == "created"


async def test_a_foreign_workspace_sees_nothing(client: httpx.AsyncClient, engine: Engine) -> None:
    run = await start(client, (await publish(client, SUM))["workflow"]["id"], {"x": 1})
    workflow_id = run["workflow_id"]
    other = uuid.uuid4()
    await engine.db.pool.execute("INSERT INTO workspaces (id, name) VALUES ($1, 'other')", other)
    nowhere = {"X-Agentflow-Workspace": str(uuid.uuid4())}  # names no workspace at all
    for path in (WORKFLOWS, f"{WORKFLOWS}/{workflow_id}", f"{WORKFLOWS}/{workflow_id}/runs/{run['id']}"):
        assert error_code(await client.get(path, headers=nowhere), 404) == "workspace_not_found"
    for workspace in (other,):
        headers = {"X-Agentflow-Workspace": str(workspace)}
        assert (await client.get(WORKFLOWS, headers=headers)).json() == {"workflows": []}
        for path in (f"{WORKFLOWS}/{workflow_id}", f"{WORKFLOWS}/sum", f"{WORKFLOWS}/sum/runs"):
            assert error_code(await client.get(path, headers=headers), 404) == "workflow_not_found"
        for suffix in ("", "/cancel", "/retry"):
            method = client.post if suffix else client.get
            response = await method(f"{WORKFLOWS}/{workflow_id}/runs/{run['id']}{suffix}", headers=headers)
            assert error_code(response, 404) == "workflow_not_found"
        started = await client.post(f"{WORKFLOWS}/{workflow_id}/runs", json={}, headers=headers)
        assert error_code(started, 404) == "workflow_not_found"
    absent = await client.post(WORKFLOWS, json=SUM, headers={"X-Agentflow-Workspace": str(uuid.uuid4())})
    assert error_code(absent, 404) == "workspace_not_found"
    # The same name in another workspace is another workflow, at version 1.
    theirs = await client.post(WORKFLOWS, json=SUM, headers={"X-Agentflow-Workspace": str(other)})
    assert theirs.status_code == 201 and theirs.json()["workflow"]["id"] != workflow_id
    ours = (await client.get(f"{WORKFLOWS}/sum/runs")).json()["runs"]
    assert [r["id"] for r in ours] == [run["id"]]
    for bad in ("not-a-uuid", "x" * 10_000, ""):
        response = await client.get(WORKFLOWS, headers={"X-Agentflow-Workspace": bad})
        assert error_code(response, 400) == "invalid_workspace", bad[:20]


def _deep(depth: int) -> bytes:
    return b'{"payload": ' + b"[" * depth + b"]" * depth + b"}"


async def _chunks(total: int) -> AsyncIterator[bytes]:
    yield b'{"payload": "'
    for _ in range(total // 65536):
        yield b"a" * 65536
    yield b'"}'


HOSTILE: list[tuple[str, Any, dict[str, str], int, str]] = [
    ("10 MiB", b'{"payload": "' + b"a" * (10 << 20) + b'"}', {}, 413, "body_too_large"),
    ("2 MiB chunked", "chunked", {}, 413, "body_too_large"),
    ("200 deep", _deep(200), {}, 400, "too_deep"),
    ("100000 deep", _deep(100_000), {}, 400, "too_deep"),
    ("NUL value", b'{"payload": {"a": "x\\u0000y"}}', {}, 400, "unstorable_text"),
    ("NUL key", b'{"payload": {"a\\u0000": 1}}', {}, 400, "unstorable_text"),
    ("lone surrogate", b'{"payload": "\\ud800"}', {}, 400, "unstorable_text"),
    ("lone low surrogate", b'{"payload": ["ok", "\\udc00x"]}', {}, 400, "unstorable_text"),
    ("1e400", b'{"payload": {"n": 1e400}}', {}, 400, "number_out_of_range"),
    ("-1e400", b'{"payload": -1e400}', {}, 400, "number_out_of_range"),
    ("huge int", b'{"payload": ' + b"9" * 5000 + b"}", {}, 400, "number_out_of_range"),
    ("2**64", b'{"payload": {"n": [18446744073709551616]}}', {}, 400, "number_out_of_range"),
    ("NaN", b'{"payload": NaN}', {}, 400, "invalid_json"),
    ("Infinity", b'{"payload": Infinity}', {}, 400, "invalid_json"),
    ("truncated", b'{"payload": ', {}, 400, "invalid_json"),
    ("not UTF-8", b'{"payload": "\xed\xa0\x80"}', {}, 400, "invalid_json"),
    ("text/plain", b'{"payload": 1}', {"content-type": "text/plain"}, 415, "unsupported_media_type"),
]


@pytest.mark.parametrize(("name", "body", "headers", "status", "code"), HOSTILE, ids=[h[0] for h in HOSTILE])
async def test_hostile_bodies_get_documented_4xx(
    client: httpx.AsyncClient, name: str, body: Any, headers: dict[str, str], status: int, code: str
) -> None:
    await publish(client, SUM)
    for path in (f"{WORKFLOWS}/sum/runs", WORKFLOWS):
        content = _chunks(2 << 20) if body == "chunked" else body
        base = {"content-type": "application/json"}
        response = await client.post(path, content=content, headers={**base, **headers})
        assert error_code(response, status) == code, (path, response.text[:300])
    assert (await client.get(f"{WORKFLOWS}/sum/runs")).json()["runs"] == [], "a hostile body was stored"
    assert (await client.get(f"{WORKFLOWS}/sum")).json()["latest_version"] == 1


async def test_valid_edge_bodies_are_accepted(client: httpx.AsyncClient) -> None:
    await publish(client, SUM)
    payload = {"deep": _nest(60), "big": 2**63, "tiny": 1e-300, "text": "é"}
    run = await start(client, "sum", payload)
    assert run["input"] == payload
    pair = await client.post(
        f"{WORKFLOWS}/sum/runs",
        content=b'{"payload": {"pair": "\\ud83d\\ude00"}}',
        headers={"content-type": "application/json"},
    )
    assert pair.status_code == 201 and pair.json()["input"] == {"pair": "\N{GRINNING FACE}"}
    # A body without a Content-Type is what a web page sends without a preflight: refused
    # (tests/integration/test_s7_browser_requests.py).
    no_type = await client.post(f"{WORKFLOWS}/sum/runs", content=b'{"payload": 1}')
    assert "content-type" not in no_type.request.headers
    assert error_code(no_type, 415) == "unsupported_media_type"
    empty = await client.post(f"{WORKFLOWS}/sum/runs")
    assert empty.status_code == 201 and empty.json()["input"] == {}


def _nest(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


async def test_metrics_counters_and_queue_gauges(client: httpx.AsyncClient, engine: Engine) -> None:
    async def scrape() -> dict[str, float]:
        response = await client.get("/metrics")
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
        samples = {}
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return samples

    await publish(client, SUM)
    before = await scrape()
    for i in range(2):
        await start(client, "sum", {"x": i})
    queued = await scrape()
    assert queued["agentflow_runs_started_total"] == before["agentflow_runs_started_total"] + 2
    assert queued["agentflow_queue_depth"] == 2
    assert queued["agentflow_queue_oldest_ready_seconds"] >= 0
    assert queued["agentflow_runs_by_status{status=created}"] == 2
    assert queued["agentflow_database_up"] == 1
    await engine.run_worker(until_idle=True)
    drained = await scrape()
    assert drained["agentflow_queue_depth"] == 0 and drained["agentflow_queue_oldest_ready_seconds"] == 0
    assert drained["agentflow_runs_by_status{status=completed}"] == 2
    assert drained["agentflow_runs_by_status{status=created}"] == 0
    assert (
        drained["agentflow_steps_total{status=completed}"]
        >= before.get("agentflow_steps_total{status=completed}", 0) + 6
    )


async def test_database_down_is_503_with_retry_after(database_url: str) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    url = f"postgresql://nobody@127.0.0.1:{dead_port}/none"
    settings = make_settings(url)
    pool = await asyncpg.create_pool(url, min_size=0, max_size=1)
    engine = Engine(Database(pool, url, settings), settings, None)
    try:
        async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base, timeout=60) as c:
            assert (await c.get("/healthz")).status_code == 200
            for response in (
                await c.get("/readyz"),
                await c.get(WORKFLOWS),
                await c.post(WORKFLOWS, json=SUM),
                await c.get(f"{WORKFLOWS}/sum/runs/{uuid.uuid4()}"),
            ):
                assert error_code(response, 503) == "database_unavailable"
                assert int(response.headers["retry-after"]) > 0
            metrics = await c.get("/metrics")
            assert metrics.status_code == 200 and "agentflow_database_up 0.0" in metrics.text
            assert "agentflow_queue_depth" not in metrics.text
    finally:
        await pool.close()


async def test_catch_all_is_a_bare_500(engine: Engine) -> None:
    app = create_app(engine)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("secret detail")

    before = internal_errors()
    async with serve(app) as base, httpx.AsyncClient(base_url=base) as c:
        response = await c.get("/boom")
    assert response.status_code == 500
    assert response.json() == {
        "error": {"code": "internal_error", "message": "an unexpected error occurred; it has been logged"}
    }
    assert internal_errors() == before + 1


async def test_openapi_documents_models_and_error_contract(client: httpx.AsyncClient) -> None:
    doc = (await client.get("/openapi.json")).json()
    for path in (
        WORKFLOWS,
        f"{WORKFLOWS}/{{workflow_id}}",
        f"{WORKFLOWS}/{{workflow_id}}/versions/{{version}}",
        f"{WORKFLOWS}/{{workflow_id}}/runs",
        f"{WORKFLOWS}/{{workflow_id}}/runs/{{run_id}}",
        f"{WORKFLOWS}/{{workflow_id}}/runs/{{run_id}}/cancel",
        f"{WORKFLOWS}/{{workflow_id}}/runs/{{run_id}}/retry",
        "/healthz",
        "/readyz",
        "/metrics",
    ):
        assert path in doc["paths"], path
    start_op = doc["paths"][f"{WORKFLOWS}/{{workflow_id}}/runs"]["post"]
    assert start_op["responses"]["201"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/StartedRun"
    )
    assert start_op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/StartedRun"
    )
    invalid = start_op["responses"]["422"]["content"]["application/json"]["schema"]["$ref"]
    assert invalid.endswith("/ErrorResponse")
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    assert {"RunDetail", "Step", "WorkflowDetail", "Published"} <= set(doc["components"]["schemas"])
    docs = await client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


async def test_serve_command_runs_api_and_worker_and_stops_gracefully(
    database_url: str, engine: Engine, tmp_path: Path
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTFLOW_")}
    env.update(
        {"AGENTFLOW_DATABASE_URL": database_url, "AGENTFLOW_POOL_MAX_SIZE": "4", "PYTHONPATH": str(ROOT)}
    )
    log = (tmp_path / "serve.log").open("wb")
    args = ["serve", "--port", str(port), "--import", "tests.support.tools", "--concurrency", "2"]
    process = subprocess.Popen(
        [sys.executable, "-c", "from agentflow.cli import main; main()", *args],
        env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            for _ in range(600):
                try:
                    if (await c.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert process.poll() is None, (tmp_path / "serve.log").read_text()
                await asyncio.sleep(0.1)
            await publish(c, SUM)
            done = await poll_run(c, "sum", (await start(c, "sum", {"x": 1}))["id"], {"completed", "failed"})
            assert done["status"] == "completed", "the in-process worker did not run it"
            slow = flow("slow", {"id": "s", "type": "tool", "tool": "sleepy", "args": {"seconds": 3}})
            await publish(c, slow)
            run = await start(c, "slow")
            claimed = await poll_run(c, "slow", run["id"], {"in_progress", "completed"})
            assert claimed["status"] in ("in_progress", "completed")
        process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(process.wait, 60) == 0, (tmp_path / "serve.log").read_text()
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
    # The step in flight at SIGTERM was finished and checkpointed, and the run released.
    steps = await engine.list_steps(run["id"])
    assert [(s.node_id, s.status) for s in steps] == [("s", "completed")]
    assert (await engine.get_run(run["id"])).lease_owner is None
