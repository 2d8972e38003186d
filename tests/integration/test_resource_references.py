"""Resource references (issue 15, seed 004): each published version records what it uses, "which
workflows use this?" is answered from that, and deleting or retiring a resource in use is
refused with the list unless forced; workflows can be disabled, archived and deleted."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.core.errors import ConflictError
from agentflow.engine import Engine
from agentflow.store import references
from tests.conftest import make_settings
from tests.support.agents import running_worker, until
from tests.support.cli import cli_env, run_cli

CHILD = {
    "name": "child",
    "kind": "structured",
    "nodes": [{"id": "end", "type": "finish", "output": {"ok": True}}],
}
ANALYST = {
    "name": "analyst",
    "kind": "employee",
    "title": "Analyst",
    "prompt": "You analyse.",
    "model": "scripted:x",
}
MCP = {"name": "crm", "url": "https://mcp.example.com/mcp", "credential": "crm-token"}


def flow(name: str, *nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "nodes": list(nodes), **extra}


PARENT = flow(
    "parent",
    {"id": "fetch", "type": "http_request", "url": "https://api.example.com/x", "credential": "stripe"},
    {"id": "call", "type": "run_workflow", "workflow": "child"},
    {"id": "assess", "type": "run_employee", "employee": "analyst", "assignment": "Assess."},
    {"id": "note", "type": "tool", "tool": "crm.note", "args": {"text": "hi"}},
    {"id": "helper", "type": "agent", "prompt": "Help.", "tools": ["crm_lookup"], "mcp_servers": [MCP]},
    {
        "id": "ask",
        "type": "user_input",
        "message": "OK?",
        "assignees": ["lee", "role:finance", "ops@example.com", "{{ payload.owner }}"],
    },
)
AGENT = {
    "name": "desk",
    "kind": "agent",
    "prompt": "Answer.",
    "tools": ["crm_lookup"],
    "http_tools": [
        {"name": "orders", "method": "GET", "url": "https://api.example.com/o", "credential": "stripe"}
    ],
}


async def names_using(engine: Engine, kind: Any, name: str) -> list[tuple[str, int]]:
    return [(r.workflow, r.version) for r in await engine.resources.references(kind, name)]


async def publish_all(engine: Engine) -> None:
    for config in (CHILD, ANALYST, PARENT, AGENT):
        await engine.publish_workflow(config)


async def test_a_version_records_what_it_uses_and_lookups_find_it(engine: Engine) -> None:
    await publish_all(engine)
    version = await engine.get_version("parent")
    stored = await engine.db.pool.fetchval(
        "SELECT refs FROM workflow_versions WHERE workflow_id = $1 AND version = $2",
        version.workflow_id,
        version.version,
    )
    assert sorted(stored) == [
        "credential:crm-token",
        "credential:stripe",
        "employee:analyst",
        "person:lee",
        "role:finance",
        "tool:crm.note",
        "tool:crm_lookup",
        "workflow:analyst",
        "workflow:child",
    ]  # the email address and the template name no one in the directory
    assert await names_using(engine, "credential", "stripe") == [("desk", 1), ("parent", 1)]
    assert await names_using(engine, "tool", "crm_lookup") == [("desk", 1), ("parent", 1)]
    assert await names_using(engine, "workflow", "child") == [("parent", 1)]
    assert await names_using(engine, "role", "finance") == [("parent", 1)]
    assert await names_using(engine, "credential", "nobody-uses-this") == []


async def test_only_versions_that_can_still_act_count(engine: Engine) -> None:
    napping = flow("napper", {"id": "nap", "type": "wait", "duration": "1h", "next": "f"},
                   {"id": "f", "type": "http_request", "url": "https://a.example.com", "credential": "old"})  # fmt: skip
    await engine.publish_workflow(napping)
    async with running_worker(engine):
        run = await engine.start_run("napper", {})
        await until(engine, run.id, lambda r: r.status == "waiting")
    napping["nodes"][1]["credential"] = "new"
    await engine.publish_workflow(napping)
    # Version 1 is no longer the latest, but a run parked on it will still use "old".
    [old] = await engine.resources.references("credential", "old")
    assert (old.workflow, old.version, old.latest, old.active_runs) == ("napper", 1, False, 1)
    assert await names_using(engine, "credential", "new") == [("napper", 2)]
    await engine.cancel_run(run.id)
    assert await names_using(engine, "credential", "old") == []
    await engine.set_flags("napper", archived=True)  # an archived workflow uses nothing any more
    assert await names_using(engine, "credential", "new") == []


async def test_versions_published_before_references_get_theirs_at_the_first_lookup(engine: Engine) -> None:
    await publish_all(engine)
    # As a database upgraded from before: the column is there, the references are not.
    await engine.db.pool.execute("ALTER TABLE workflow_versions DISABLE TRIGGER workflow_versions_immutable")
    await engine.db.pool.execute("UPDATE workflow_versions SET refs = NULL")
    await engine.db.pool.execute("ALTER TABLE workflow_versions ENABLE TRIGGER workflow_versions_immutable")
    assert await names_using(engine, "workflow", "child") == [("parent", 1)]
    missing = await engine.db.pool.fetchval("SELECT count(*) FROM workflow_versions WHERE refs IS NULL")
    assert missing == 0
    assert (
        await references.fill_missing(engine.db.pool, (await engine.get_workflow("child")).workspace_id) == 0
    )


def test_a_stored_config_that_no_longer_parses_references_nothing() -> None:
    assert references.stored_references({"name": "x", "kind": "structured", "nodes": "not a list"}) == []


async def test_a_credential_or_person_in_use_is_deleted_only_when_forced(engine: Engine) -> None:
    await publish_all(engine)
    await engine.credentials.create("stripe", {"kind": "bearer", "token": "t0k3n"})
    await engine.people.set("lee", {"email": "lee@example.com"})
    with pytest.raises(ConflictError) as refused:
        await engine.credentials.delete("stripe")
    assert refused.value.code == "resource_in_use"
    assert {r["workflow"] for r in refused.value.info.details["references"]} == {"desk", "parent"}
    assert "desk, parent" in str(refused.value)
    assert (await engine.credentials.get("stripe")).name == "stripe"  # nothing deleted
    assert (await engine.credentials.delete("stripe", force=True)).name == "stripe"
    with pytest.raises(ConflictError):
        await engine.people.delete("lee")
    await engine.people.delete("lee", force=True)
    assert await engine.people.list() == []


async def test_a_workflow_other_workflows_start_is_retired_only_when_forced(engine: Engine) -> None:
    await publish_all(engine)
    for change in ({"enabled": False}, {"archived": True}, {"draft": True}):
        with pytest.raises(ConflictError) as refused:
            await engine.set_flags("child", **change)
        assert refused.value.code == "resource_in_use", change
    with pytest.raises(ConflictError):
        await engine.set_flags("analyst", enabled=False)  # an employee is referenced as one too
    with pytest.raises(ConflictError):
        await engine.delete_workflow("child")
    assert (await engine.get_workflow("child")).enabled
    # A workflow naming itself does not keep itself alive.
    await engine.publish_workflow(flow("loop", {"id": "again", "type": "run_workflow", "workflow": "child"}))
    changed = await engine.set_flags("child", enabled=False, force=True)
    assert not changed.enabled


async def test_an_archived_workflow_is_hidden_and_started_by_nothing(engine: Engine) -> None:
    await engine.publish_workflow(CHILD)
    archived = await engine.set_flags("child", archived=True)
    assert archived.archived_at is not None and not archived.enabled
    assert [w.name for w in await engine.list_workflows()] == []
    assert [w.name for w in await engine.list_workflows(archived=True)] == ["child"]
    with pytest.raises(ConflictError) as refused:
        await engine.start_run("child", {})
    assert refused.value.code == "workflow_archived"
    assert await engine.db.pool.fetchval("SELECT count(*) FROM runs") == 0
    with pytest.raises(ConflictError) as enabling:
        await engine.set_flags("child", enabled=True)
    assert enabling.value.code == "workflow_archived"
    await engine.publish_workflow({**CHILD, "description": "v2"}, enabled=True)  # a new version stays off
    assert not (await engine.get_workflow("child")).enabled
    back = await engine.set_flags("child", archived=False)
    assert back.archived_at is None and not back.enabled
    assert [w.name for w in await engine.list_workflows()] == ["child"]
    await engine.set_flags("child", enabled=True)
    assert (await engine.start_run("child", {})).status == "created"


async def test_a_run_cannot_start_an_archived_child(engine: Engine) -> None:
    await engine.publish_workflow(CHILD)
    await engine.publish_workflow(flow("caller", {"id": "call", "type": "run_workflow", "workflow": "child"}))
    await engine.set_flags("caller", archived=True)  # first, so nothing else uses child
    await engine.set_flags("caller", archived=False)
    await engine.set_flags("caller", enabled=True)
    await engine.set_flags("child", archived=True, force=True)
    async with running_worker(engine):
        run = await engine.start_run("caller", {})
        done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "failed" and done.error is not None
    assert done.error["code"] == "child_workflow_archived"


async def test_a_workflow_is_deleted_with_its_runs_only_once_none_is_active(engine: Engine) -> None:
    await engine.publish_workflow(CHILD)
    active = await engine.start_run("child", {})
    with pytest.raises(ConflictError) as refused:
        await engine.delete_workflow("child")
    assert refused.value.code == "workflow_has_active_runs"
    assert refused.value.info.details == {"active_runs": 1}
    await engine.cancel_run(active.id)
    async with running_worker(engine):
        ended = await engine.wait_for_run((await engine.start_run("child", {})).id, timeout=30)
    assert ended.status == "completed", ended.error
    assert await engine.db.pool.fetchval("SELECT count(*) FROM run_steps WHERE run_id = $1", ended.id) > 0
    await engine.db.pool.execute(
        "INSERT INTO run_deltas (workspace_id, run_id, step_seq, attempt, kind, data)"
        " SELECT workspace_id, id, 0, 1, 'text', 'streamed' FROM runs WHERE id = $1",
        active.id,
    )
    await engine.delete_workflow("child")
    # Steps and streamed text have no foreign key to their run: deleted with it all the same.
    for table in ("workflows", "workflow_versions", "runs", "run_steps", "run_deltas"):
        assert await engine.db.pool.fetchval(f"SELECT count(*) FROM {table}") == 0, table


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[Engine]:
    """An engine that can store credentials (a sealing key)."""
    eng = await Engine.connect(
        make_settings(database_url, secret_key=base64.b64encode(b"k" * 32).decode()), migrate_schema=False
    )
    yield eng
    await eng.close()


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


async def test_the_api_answers_references_and_refuses_with_the_list(
    engine: Engine, api: httpx.AsyncClient
) -> None:
    await publish_all(engine)
    found = await api.get("/api/resources/credential/stripe/references")
    assert found.status_code == 200, found.text
    assert [(r["workflow"], r["latest"], r["enabled"]) for r in found.json()["references"]] == [
        ("desk", True, True),
        ("parent", True, True),
    ]
    assert (await api.get("/api/resources/widget/x/references")).status_code == 422
    await engine.credentials.create("stripe", {"kind": "bearer", "token": "t0k3n"})
    refused = await api.delete("/api/credentials/stripe")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "resource_in_use"
    assert {r["workflow"] for r in refused.json()["error"]["details"]["references"]} == {"desk", "parent"}
    assert (await api.delete("/api/credentials/stripe?force=true")).status_code == 200
    assert (await api.delete("/api/credentials/stripe")).status_code == 404

    child = (await engine.get_workflow("child")).id
    off = await api.patch(f"/api/ai/workflows/{child}", json={"enabled": False})
    assert off.status_code == 409 and off.json()["error"]["code"] == "resource_in_use"
    empty = await api.patch(f"/api/ai/workflows/{child}", json={})
    assert empty.status_code == 422
    archived = await api.patch(f"/api/ai/workflows/{child}?force=true", json={"archived": True})
    assert archived.status_code == 200 and archived.json()["archived_at"] is not None
    listed = (await api.get("/api/ai/workflows")).json()["workflows"]
    assert "child" not in [w["name"] for w in listed]
    assert [w["name"] for w in (await api.get("/api/ai/workflows?archived=true")).json()["workflows"]] == [
        "child"
    ]
    deleted = await api.delete(f"/api/ai/workflows/{child}?force=true")
    assert deleted.status_code == 204
    assert (await api.get(f"/api/ai/workflows/{child}")).status_code == 404


def test_the_cli_lists_references_and_deletes_workflows(database_url: str) -> None:
    env = cli_env(database_url)
    import json
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for config in (CHILD, flow("caller", {"id": "call", "type": "run_workflow", "workflow": "child"})):
            path = Path(tmp) / f"{config['name']}.json"
            path.write_text(json.dumps(config))
            paths.append(str(path))
        assert run_cli(["workflows", "apply", *paths], env).returncode == 0
    used = run_cli(["workflows", "references", "workflow", "child"], env)
    assert used.returncode == 0 and "caller" in used.stdout, used.stdout + used.stderr
    refused = run_cli(["workflows", "archive", "child"], env)
    assert refused.returncode == 1 and "resource_in_use" in refused.stderr and "caller" in refused.stderr
    assert run_cli(["workflows", "delete", "caller", "--yes"], env).returncode == 0
    assert "nothing uses" in run_cli(["workflows", "references", "workflow", "child"], env).stdout
    assert run_cli(["workflows", "references", "widget", "x"], env).returncode == 2
