"""The audit log (issue 15, seed 004): who changed what through the API, with the answer's
status; begun before the handler runs, so a server killed mid-request leaves an entry whose
outcome is unknown rather than an unrecorded change."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.api.route_table import api_routes
from agentflow.core.audit import ACTIONS, DATA_PLANE, is_decided
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.engine import Engine
from agentflow.runtime.scheduler import Scheduler
from agentflow.store import audit_log
from tests.support.processes import worker_env
from tests.support.serve_process import ServeProcess

FLOW = {"name": "audited", "kind": "structured", "nodes": [{"id": "done", "type": "finish", "output": "hi"}]}
WAITING = {
    "name": "waiting",
    "kind": "structured",
    "nodes": [
        {"id": "pause", "type": "wait", "duration": "1h", "next": "done"},
        {"id": "done", "type": "finish"},
    ],
}


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine, auth="required"))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


async def key(engine: Engine, role: Any, name: str, workspace: Any = None) -> tuple[str, dict[str, str]]:
    extra = {"workspace_id": workspace} if workspace is not None else {}
    record, token = await engine.keys.create("api", name, role=role, **extra)
    return record["id"], {"Authorization": f"Bearer {token}"}


async def entries(api: httpx.AsyncClient, who: dict[str, str], **query: Any) -> list[dict[str, Any]]:
    answer = await api.get("/api/audit", params=query, headers=who)
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["entries"]
    return found


async def test_writes_are_recorded_with_who_what_and_how_it_ended(
    engine: Engine, api: httpx.AsyncClient
) -> None:
    admin_id, admin = await key(engine, "admin", "deploy bot")
    operator_id, operator = await key(engine, "operator", "on-call")
    viewer_id, viewer = await key(engine, "viewer", "auditor")
    published = await api.post("/api/ai/workflows", json=FLOW, headers=admin)
    assert published.status_code == 201
    workflow_id = published.json()["workflow"]["id"]
    assert (
        await api.patch("/api/ai/workflows/audited", json={"enabled": False}, headers=operator)
    ).status_code == 200
    refused = await api.post("/api/keys", json={"kind": "api", "name": "sneaky"}, headers=viewer)
    assert refused.status_code == 403
    # Reads and data-plane writes are not audited.
    await api.get("/api/ai/workflows", headers=viewer)
    await api.post("/api/ai/workflows", json=WAITING, headers=admin)
    started = await api.post("/api/ai/workflows/waiting/runs", json={"payload": {}}, headers=operator)
    run_id = started.json()["id"]
    canceled = await api.post(f"/api/ai/workflows/waiting/runs/{run_id}/cancel", headers=operator)
    assert canceled.status_code == 200, canceled.text

    log = await entries(api, viewer)
    assert [e["action"] for e in log] == [
        "run.cancel",
        "workflow.publish",
        "key.create",
        "workflow.update",
        "workflow.publish",
    ], "newest first; the read and the run's start are not there"
    cancel, _, denied, update, publish = log
    assert publish["actor"] == f"key:{admin_id}" and publish["actor_name"] == "deploy bot"
    assert publish["role"] == "admin" and publish["status"] == 201 and publish["finished_at"] is not None
    assert publish["target"] == {"workflow_id": workflow_id, "workflow": "audited", "version": 1}
    assert publish["method"] == "POST" and publish["route"] == "/api/ai/workflows"
    assert update["actor"] == f"key:{operator_id}" and update["target"] == {
        "workflow_id": "audited",
        "enabled": False,
    }
    assert denied["actor"] == f"key:{viewer_id}" and denied["status"] == 403, "a refusal is recorded too"
    assert cancel["target"] == {"workflow_id": "waiting", "run_id": run_id} and cancel["status"] == 200

    # Filters: a workflow by name finds the entries that named it by id too; an action family.
    mine = await entries(api, viewer, workflow="audited")
    assert [e["action"] for e in mine] == ["workflow.update", "workflow.publish"]
    assert [e["action"] for e in await entries(api, viewer, workflow=workflow_id)] == [
        "workflow.update",
        "workflow.publish",
    ]
    assert {e["action"] for e in await entries(api, viewer, action="workflow")} == {
        "workflow.publish",
        "workflow.update",
    }
    assert [e["action"] for e in await entries(api, viewer, actor=f"key:{operator_id}")] == [
        "run.cancel",
        "workflow.update",
    ]
    # Pages, newest first.
    first = (await api.get("/api/audit", params={"limit": 2}, headers=viewer)).json()
    second = (
        await api.get("/api/audit", params={"limit": 2, "before": first["next_before"]}, headers=viewer)
    ).json()
    assert [e["id"] for e in first["entries"] + second["entries"]] == [e["id"] for e in log[:4]]
    unknown = await api.get("/api/audit", params={"who": "me"}, headers=viewer)
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "query_parameter_unknown"
    assert unknown.json()["error"]["details"] == {"parameter": "who"}


async def test_another_workspace_sees_none_of_it(engine: Engine, api: httpx.AsyncClient) -> None:
    _, admin = await key(engine, "admin", "root")
    created = await api.post("/api/workspaces", json={"name": "tenant b"}, headers=admin)
    other = {"Authorization": f"Bearer {created.json()['api_key']}"}
    await api.post("/api/ai/workflows", json=FLOW, headers=admin)
    assert [e["action"] for e in await entries(api, admin)] == ["workflow.publish", "workspace.create"]
    assert await entries(api, other) == []
    assert await entries(api, other, workflow="audited") == []


async def test_loopback_requests_without_a_key_are_recorded_as_local(engine: Engine) -> None:
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        assert (await client.post("/api/ai/workflows", json=FLOW)).status_code == 201
        assert (await client.put("/api/people/lee", json={"email": "lee@example.com"})).status_code in (
            200,
            201,
        )
        log = (await client.get("/api/audit")).json()["entries"]
    assert [(e["action"], e["actor"], e["actor_name"]) for e in log] == [
        ("person.put", "local", None),
        ("workflow.publish", "local", None),
    ]
    assert log[0]["target"] == {"handle": "lee"}


def test_every_write_route_is_audited_or_deliberately_not(engine: Engine) -> None:
    routes = api_routes(create_app(engine).routes)
    writes = {(m, e.path) for e in routes for m in e.methods - {"GET", "HEAD", "OPTIONS"}}
    assert len(writes) > 30
    undecided = sorted(w for w in writes if not is_decided(*w))
    assert undecided == [], "add each to core.audit.ACTIONS or DATA_PLANE"
    stale = sorted((set(ACTIONS) | DATA_PLANE) - writes)
    assert stale == [], "these routes no longer exist"


async def test_old_entries_are_pruned_and_zero_keeps_them(engine: Engine, api: httpx.AsyncClient) -> None:
    _, admin = await key(engine, "admin", "root")
    for n in range(3):
        await api.post("/api/ai/workflows", json={**FLOW, "name": f"flow-{n}"}, headers=admin)
    await engine.db.pool.execute(
        "UPDATE audit_log SET at = now() - interval '40 days' WHERE target->>'workflow' IN ('flow-0', 'flow-1')"
    )
    assert await Scheduler(engine.db, audit_retention_days=0).prune_audit() == 0
    assert await Scheduler(engine.db, audit_retention_days=30).prune_audit() == 2
    assert [e["target"]["workflow"] for e in await entries(api, admin)] == ["flow-2"]


async def test_an_entry_begun_survives_a_server_killed_mid_request(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    server = ServeProcess(worker_env(database_url), tmp_path, worker=False)
    server.wait_ready()
    blocker = await asyncpg.connect(database_url)
    try:
        # The publish waits on the workflows table; its audit entry is already written.
        transaction = blocker.transaction()
        await transaction.start()
        await blocker.execute("LOCK TABLE workflows IN ACCESS EXCLUSIVE MODE")
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            pending = asyncio.create_task(http.post("/api/ai/workflows", json=FLOW))
            begun = None
            for _ in range(200):
                begun = await engine.db.pool.fetchrow(
                    "SELECT * FROM audit_log WHERE action = 'workflow.publish'"
                )
                if begun is not None:
                    break
                await asyncio.sleep(0.05)
            assert begun is not None, "the entry is written before the handler runs"
            assert begun["status"] is None and begun["actor"] == "local"
            server.proc.kill()
            server.proc.wait(10)
            with pytest.raises(httpx.HTTPError):
                await pending
        await transaction.rollback()
    finally:
        await blocker.close()
        server.stop()
    after = await engine.db.pool.fetchrow(
        "SELECT status, finished_at FROM audit_log WHERE id = $1", begun["id"]
    )
    assert after is not None and after["status"] is None and after["finished_at"] is None, (
        "the outcome is unknown, and the entry says so"
    )


async def test_finishing_an_entry_while_the_database_is_down_logs_and_loses_the_answer_nothing(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    entry = await audit_log.begin(
        engine.db.pool, DEFAULT_WORKSPACE, actor="a", actor_name=None, role="admin", action="workflow.publish", method="POST", route="/x", target={},
    )  # fmt: skip
    # Nothing listens on port 9 of this host: every statement is refused, as when PostgreSQL is down.
    down = await asyncpg.create_pool("postgresql://nobody@127.0.0.1:9/none", min_size=0)
    try:
        await audit_log.finish(down, DEFAULT_WORKSPACE, entry, status=201, noted={})  # no exception
    finally:
        await down.close()
    assert "could not record the status of entry" in caplog.text
    row = await engine.db.pool.fetchrow("SELECT status, finished_at FROM audit_log WHERE id = $1", entry)
    assert row["status"] is None and row["finished_at"] is None  # begun, outcome unknown
