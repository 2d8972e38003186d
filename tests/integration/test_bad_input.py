"""Bad input that once ended in a 500 (or worse) gets a documented 4xx with a stable code.

NUL bytes and invalid UTF-8 in paths and query strings, a workspace header naming no
workspace, oversized budgets and durations, deep or exploding YAML, a body that stalls.
Each case checks the database afterwards: nothing was stored.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.core.config_validation import parse_config_text
from agentflow.core.durations import MAX_DURATION, parse_duration
from agentflow.core.errors import ConfigError
from agentflow.engine import DEFAULT_WORKSPACE, Engine
from agentflow.knowledge.documents import prepare_document
from agentflow.runtime.metrics import REGISTRY
from tests.support.cli import cli_env, run_cli
from tests.support.http_server import WORKFLOWS, error_code, serve

FLOW = {"name": "f", "kind": "structured", "nodes": [{"id": "done", "type": "finish"}]}


def internal_errors() -> float:
    return REGISTRY.get_sample_value("agentflow_http_internal_errors_total") or 0.0


@pytest.fixture
async def http(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    """A real uvicorn server (paths are decoded as in production) and a client; no request may 500."""
    await engine.publish_workflow(FLOW)
    before = internal_errors()
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base, timeout=30) as client:
        yield client
    assert internal_errors() == before, "a request ended in a 500 internal_error"


async def stored(engine: Engine) -> dict[str, int]:
    row = await engine.db.pool.fetchrow(
        "SELECT (SELECT count(*) FROM events) AS events, (SELECT count(*) FROM runs) AS runs,"
        " (SELECT count(*) FROM access_keys) AS keys, (SELECT count(*) FROM accounts) AS accounts,"
        " (SELECT count(*) FROM workflow_versions) AS versions"
    )
    return dict(row)


NUL_AND_BAD_UTF8 = [
    # Query parameters: PostgreSQL text cannot hold NUL.
    ("GET", "/api/tasks?assignee=%00", 400, "unstorable_text"),
    ("GET", "/api/tasks?account_id=a%00b", 400, "unstorable_text"),
    ("GET", "/api/accounts?owner=%00", 400, "unstorable_text"),
    ("GET", "/api/accounts?after=x%00", 400, "unstorable_text"),
    ("GET", "/api/knowledge/search?q=churn%00", 400, "unstorable_text"),
    ("GET", "/api/knowledge/plan?scenario=%00", 400, "unstorable_text"),
    ("GET", "/api/reports/impact?account=%00", 400, "unstorable_text"),
    ("GET", "/api/approvals?status=%00", 400, "unstorable_text"),
    ("GET", "/api/accounts/acme/events?source=%00", 400, "unstorable_text"),
    # Path ids.
    ("GET", "/api/accounts/a%00b", 400, "unstorable_text"),
    ("PUT", "/api/accounts/a%00b", 400, "unstorable_text"),
    ("GET", "/api/accounts/a%00b/events", 400, "unstorable_text"),
    ("DELETE", "/api/keys/k%00", 400, "unstorable_text"),
    ("GET", "/api/tasks/%00", 400, "unstorable_text"),
    ("GET", f"{WORKFLOWS}/f%00", 400, "unstorable_text"),
    ("GET", "/api/ai/workflows/f%00/report", 400, "unstorable_text"),
    ("DELETE", "/api/knowledge/%00", 400, "unstorable_text"),
    # Invalid UTF-8 once percent-decoded.
    ("GET", "/api/accounts/%ff", 400, "invalid_utf8"),
    ("PUT", "/api/accounts/%ed%a0%80", 400, "invalid_utf8"),
    ("DELETE", "/api/keys/%c3", 400, "invalid_utf8"),
    ("GET", f"{WORKFLOWS}/%ff/runs", 400, "invalid_utf8"),
    ("GET", "/api/tasks?assignee=%ff", 400, "invalid_utf8"),
    ("GET", "/api/accounts?owner=%ed%a0%80", 400, "invalid_utf8"),
]


@pytest.mark.parametrize(("method", "path", "status", "code"), NUL_AND_BAD_UTF8)
async def test_nul_and_invalid_utf8_in_paths_and_queries_are_refused(
    http: httpx.AsyncClient, engine: Engine, method: str, path: str, status: int, code: str
) -> None:
    body: dict[str, Any] = {"json": {"name": "x"}} if method in ("PUT", "POST") else {}
    response = await http.request(method, path, **body)
    assert error_code(response, status) == code, response.text
    assert "solution" in response.json()["error"]
    assert await stored(engine) == {"events": 0, "runs": 0, "keys": 0, "accounts": 0, "versions": 1}


async def test_a_plus_or_percent_that_is_not_nul_is_still_fine(http: httpx.AsyncClient) -> None:
    # The boundary check decodes like the router does; it must not refuse ordinary text.
    ok = await http.get("/api/tasks", params={"assignee": "a+b%20 é 100%"})
    assert ok.status_code == 200, ok.text
    account = await http.put("/api/accounts/caf%C3%A9", json={"name": "Café"})
    assert account.status_code == 200 and account.json()["id"] == "café"


async def test_a_workspace_header_naming_no_workspace_is_404(http: httpx.AsyncClient, engine: Engine) -> None:
    ghost = {"X-Agentflow-Workspace": str(uuid.uuid4())}
    for method, path, body in (
        ("GET", WORKFLOWS, None),
        ("POST", WORKFLOWS, FLOW),
        ("POST", f"{WORKFLOWS}/f/runs", {}),
        ("POST", "/api/events", {"topic": "a.b", "message_id": "1", "data": {}}),
        ("POST", "/api/keys", {"kind": "api", "name": "k"}),
        ("PUT", "/api/budget", {"daily_usd": 1}),
        ("PUT", "/api/accounts/acme", {"name": "Acme"}),
        ("POST", "/api/knowledge", {"title": "t", "body": "## a\n\ntext"}),
        ("GET", "/api/tasks", None),
    ):
        response = await http.request(method, path, json=body, headers=ghost)
        assert error_code(response, 404) == "workspace_not_found", (method, path, response.text)
    assert await stored(engine) == {"events": 0, "runs": 0, "keys": 0, "accounts": 0, "versions": 1}
    default = await http.get(WORKFLOWS, headers={"X-Agentflow-Workspace": str(DEFAULT_WORKSPACE)})
    assert default.status_code == 200


@pytest.mark.parametrize("usd", [1e8, 5e8, 1e9, 99_999_999.9999999])
async def test_a_daily_budget_too_large_to_store_is_422(
    http: httpx.AsyncClient, engine: Engine, usd: float
) -> None:
    response = await http.put("/api/budget", json={"daily_usd": usd})
    assert error_code(response, 422) == "invalid_request", response.text
    assert "daily_usd" in response.text
    assert await engine.db.pool.fetchval("SELECT count(*) FROM workspace_budgets") == 0
    with pytest.raises(ConfigError) as caught:
        await engine.governance.set_budget(daily_usd=usd, daily_tokens=None)
    assert caught.value.code == "budget_invalid"


async def test_the_largest_daily_budget_is_stored_exactly(http: httpx.AsyncClient) -> None:
    response = await http.put("/api/budget", json={"daily_usd": 10_000_000, "daily_tokens": 10**15})
    assert response.status_code == 200, response.text
    assert response.json()["daily_usd"] == 10_000_000


# Durations: each field a config can hold a duration in, with a value past timedelta's range
# (OverflowError before) and one within it but past the documented maximum.
DURATION_FIELDS: list[tuple[str, dict[str, Any], str]] = [
    ("wait", {"nodes": [{"id": "w", "type": "wait", "duration": "{d}"}, {"id": "x", "type": "finish"}]},
     "nodes[0].duration"),
    ("timeout", {"timeout": "{d}", "nodes": [{"id": "x", "type": "finish"}]}, "timeout"),
    ("retry initial", {"retry": {"initial_delay": "{d}"}, "nodes": [{"id": "x", "type": "finish"}]},
     "retry.initial_delay"),
    ("retry max", {"retry": {"max_delay": "{d}"}, "nodes": [{"id": "x", "type": "finish"}]},
     "retry.max_delay"),
    ("debounce", {"trigger": {"topics": ["a.b"], "debounce": {"seconds": "{d}", "key": "x"}},
                  "nodes": [{"id": "x", "type": "finish"}]}, "trigger.debounce"),
]  # fmt: skip


def _with_duration(template: Any, value: str) -> Any:
    if isinstance(template, dict):
        return {k: _with_duration(v, value) for k, v in template.items()}
    if isinstance(template, list):
        return [_with_duration(v, value) for v in template]
    return value if template == "{d}" else template


@pytest.mark.parametrize("value", ["1e20", "99999999999d", "P9999999999W", "999999999999s", "200000w"])
@pytest.mark.parametrize(("field", "template", "path"), DURATION_FIELDS, ids=[f[0] for f in DURATION_FIELDS])
async def test_durations_past_the_maximum_are_config_errors_naming_the_field(
    http: httpx.AsyncClient, field: str, template: dict[str, Any], path: str, value: str
) -> None:
    config = {"name": "long", "kind": "structured", **_with_duration(template, value)}
    response = await http.post(WORKFLOWS, json=config)
    assert error_code(response, 422) == "config_invalid", response.text
    paths = [e["path"] for e in response.json()["error"]["details"]["errors"]]
    assert any(p.startswith(path) for p in paths), paths
    assert "at most" in response.text


def test_the_maximum_duration_itself_is_accepted_and_documented() -> None:
    assert parse_duration(MAX_DURATION) == MAX_DURATION
    assert parse_duration(f"{int(MAX_DURATION.total_seconds())}s") == MAX_DURATION
    with pytest.raises(ValueError, match="at most"):
        parse_duration(MAX_DURATION.total_seconds() + 1)
    doc = Path(__file__).resolve().parents[2] / "docs" / "reference" / "workflow-config.md"
    configuration = Path(__file__).resolve().parents[2] / "docs" / "reference" / "configuration.md"
    assert "3650" in configuration.read_text() or "3650" in doc.read_text()


async def test_a_run_waits_the_longest_duration_without_overflowing(engine: Engine) -> None:
    config = {
        "name": "long-wait",
        "kind": "structured",
        "nodes": [{"id": "w", "type": "wait", "duration": "3650d"}, {"id": "x", "type": "finish"}],
    }
    await engine.publish_workflow(config)
    run = await engine.start_run("long-wait", {})
    worker = engine.worker(concurrency=1)
    task = asyncio.create_task(worker.run())
    try:
        deadline = time.monotonic() + 20
        while (await engine.get_run(run.id)).status != "waiting" and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert (await engine.get_run(run.id)).status == "waiting"


def _nested_front_matter(depth: int) -> str:
    return "---\ntags: " + "[" * depth + "x" + "]" * depth + "\n---\n## Steps\n\n1. Do it.\n"


@pytest.mark.parametrize("depth", [100, 3000])
async def test_deeply_nested_front_matter_is_422(http: httpx.AsyncClient, engine: Engine, depth: int) -> None:
    response = await http.post("/api/knowledge", json={"title": "deep", "body": _nested_front_matter(depth)})
    assert error_code(response, 422) == "knowledge_invalid", response.text
    assert "deep" in response.json()["error"]["message"]
    count = await engine.db.pool.fetchval("SELECT count(*) FROM knowledge_documents WHERE title = 'deep'")
    assert count == 0


def test_front_matter_with_a_little_nesting_and_anchors_is_fine() -> None:
    body = "---\nbase: &b [churn, risk]\ntags: *b\nextra: {a: {b: [c]}}\n---\n## Steps\n\n1. Do it.\n"
    prepared = prepare_document("ok", body)
    assert {"churn", "risk"} <= set(prepared.tags)


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    """A valid config whose tool arguments expand to ``width ** levels`` strings (9**9: ~3 GB of JSON)."""
    lines = ['      a0: &a0 "lol"']
    for level in range(1, levels + 1):
        refs = ", ".join([f"*a{level - 1}"] * width)
        lines.append(f"      a{level}: &a{level} [{refs}]")
    head = "name: bomb\nkind: structured\nnodes:\n  - id: a\n    type: tool\n    tool: echo\n    args:\n"
    return head + "\n".join(lines) + "\n  - {id: b, type: finish}\n"


def test_a_billion_laughs_config_is_refused_quickly() -> None:
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        parse_config_text(billion_laughs(), "bomb.yaml")
    assert time.monotonic() - started < 1.0
    assert caught.value.code == "config_syntax"
    assert "alias" in caught.value.info.message


def test_a_recursive_alias_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text("&a [*a]", "loop.yaml")
    assert caught.value.code == "config_syntax"


def test_a_deeply_nested_config_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text("x: " + "[" * 5000 + "]" * 5000, "deep.yaml")
    assert caught.value.code == "config_syntax"
    assert "deep" in caught.value.info.message


def test_configs_with_modest_anchors_still_load() -> None:
    text = (
        "name: anchors\nkind: structured\nretry: &r {max_attempts: 2}\n"
        "nodes:\n  - {id: a, type: wait, duration: 1s, retry: *r}\n"
        "  - {id: done, type: finish}\n"
    )
    config = parse_config_text(text)
    assert config.name == "anchors" and config.retry.max_attempts == 2


def test_workflows_apply_refuses_a_billion_laughs_file(database_url: str, tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(billion_laughs())
    started = time.monotonic()
    result = run_cli(["workflows", "apply", str(bomb)], cli_env(database_url), timeout=60)
    assert result.returncode != 0
    assert "config_syntax" in result.stdout + result.stderr, result.stdout + result.stderr
    assert "alias" in result.stdout + result.stderr
    assert time.monotonic() - started < 30


async def test_a_stalled_body_is_cut_with_408(engine: Engine) -> None:
    app = create_app(engine, body_timeout=0.5)
    async with serve(app) as base:
        host, port = base.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(
                b"POST /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b'Content-Length: 1000\r\n\r\n{"topic": '
            )
            await writer.drain()
            started = time.monotonic()
            answer = await asyncio.wait_for(reader.read(4096), 10)
            elapsed = time.monotonic() - started
        finally:
            writer.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b'"body_timeout"' in answer
    assert 0.4 <= elapsed < 5
    assert await engine.db.pool.fetchval("SELECT count(*) FROM events") == 0


async def test_a_slow_but_steady_body_within_the_timeout_is_accepted(engine: Engine) -> None:
    app = create_app(engine, body_timeout=5)
    async with serve(app) as base:
        host, port = base.removeprefix("http://").split(":")
        body = b'{"topic": "a.b", "message_id": "slow", "data": {}}'
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                b"POST /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            )
            for piece in (body[:10], body[10:30], body[30:]):
                await asyncio.sleep(0.2)
                sock.sendall(piece)
            answer = await asyncio.to_thread(sock.recv, 4096)
    assert answer.startswith(b"HTTP/1.1 201"), answer[:300]
