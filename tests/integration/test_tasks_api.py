"""/api/tasks through a real server, and `agentflow tasks` as a process."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.api.deps import WORKSPACE_HEADER
from agentflow.engine import DEFAULT_WORKSPACE, Engine
from tests.support.cli import cli_env, invoke_cli
from tests.support.http_server import error_code, serve

TASKS = "/api/tasks"


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        serve(create_app(engine)) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=30) as http,
    ):
        yield http


async def insert_task(engine: Engine, workspace: UUID = DEFAULT_WORKSPACE, **fields: Any) -> str:
    task_id = uuid.uuid4()
    values = {"title": "Call Acme", **fields}
    names = ", ".join(values)
    marks = ", ".join(f"${i + 3}" for i in range(len(values)))
    await engine.db.pool.execute(
        f"INSERT INTO tasks (workspace_id, id, {names}) VALUES ($1, $2, {marks})",
        workspace,
        task_id,
        *values.values(),
    )
    return str(task_id)


async def test_list_get_change_and_complete(client: httpx.AsyncClient, engine: Engine) -> None:
    task_id = await insert_task(engine, assignee="ada", account_id="acme")
    await insert_task(engine, title="Other", assignee="bo")
    listed = await client.get(TASKS, params={"assignee": "ada"})
    assert listed.status_code == 200
    assert [t["id"] for t in listed.json()["tasks"]] == [task_id] and listed.json()["next_after"] is None
    page = (await client.get(TASKS, params={"limit": 1})).json()
    assert len(page["tasks"]) == 1 and page["next_after"] == page["tasks"][0]["id"]
    rest = (await client.get(TASKS, params={"limit": 1, "after": page["next_after"]})).json()
    assert len(rest["tasks"]) == 1 and rest["tasks"][0]["id"] != page["next_after"]

    got = await client.get(f"{TASKS}/{task_id}")
    assert got.status_code == 200 and got.json()["revision"] == 0 and got.json()["status"] == "open"

    changed = await client.patch(
        f"{TASKS}/{task_id}", json={"status": "in_progress", "metadata": {"crm": "T-1"}}
    )
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert body["changes"]["status"] == {"old": "open", "new": "in_progress"}
    assert body["event"] == {"topic": "task.updated", "message_id": f"task:{task_id}:1"}
    assert body["task"]["revision"] == 1 and body["task"]["metadata"] == {"crm": "T-1"}
    assert body["delivered_to_run"] is False

    done = (await client.post(f"{TASKS}/{task_id}/complete")).json()
    assert done["event"]["topic"] == "task.completed" and done["task"]["completed_at"] is not None
    again = (await client.post(f"{TASKS}/{task_id}/complete")).json()
    assert again["event"] is None and again["changes"] == {} and again["task"]["revision"] == 2
    stale = await client.patch(f"{TASKS}/{task_id}", json={"title": "x", "expected_revision": 1})
    assert error_code(stale, 409) == "task_revision_conflict"
    assert await engine.db.pool.fetchval("SELECT count(*) FROM events") == 2


async def test_unknown_malformed_and_foreign_ids_are_404(client: httpx.AsyncClient, engine: Engine) -> None:
    other = uuid.uuid4()
    await engine.db.pool.execute("INSERT INTO workspaces (id, name) VALUES ($1, 'b')", other)
    mine = await insert_task(engine)
    theirs = await insert_task(engine, workspace=other)
    foreign = {WORKSPACE_HEADER: str(other)}
    for ref in (str(uuid.uuid4()), "nope", "x" * 2000):
        assert error_code(await client.get(f"{TASKS}/{ref}"), 404) == "task_not_found", ref
        assert error_code(await client.patch(f"{TASKS}/{ref}", json={"title": "t"}), 404) == "task_not_found"
        assert error_code(await client.post(f"{TASKS}/{ref}/complete"), 404) == "task_not_found"
    assert error_code(await client.get(f"{TASKS}/%00"), 400) == "unstorable_text"  # refused at the boundary
    assert error_code(await client.get(f"{TASKS}/{mine}", headers=foreign), 404) == "task_not_found"
    refused = await client.patch(f"{TASKS}/{mine}", json={"status": "canceled"}, headers=foreign)
    assert error_code(refused, 404) == "task_not_found"
    assert error_code(await client.post(f"{TASKS}/{mine}/complete", headers=foreign), 404) == "task_not_found"
    assert error_code(await client.get(f"{TASKS}/{theirs}"), 404) == "task_not_found"
    listed = (await client.get(TASKS, headers=foreign)).json()["tasks"]
    assert [t["id"] for t in listed] == [theirs]
    assert (await client.get(f"{TASKS}/{mine}")).json()["status"] == "open"
    assert await engine.db.pool.fetchval("SELECT count(*) FROM events") == 0


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"status": "done"}, "status"),
        ({"title": ""}, "title"),
        ({"title": None}, "title"),
        ({"due_at": "2026-03-01T09:00:00"}, "due_at"),
        ({"assignee": 7}, "assignee"),
        ({"metadata": []}, "metadata"),
        ({"owner": "me"}, "owner"),
        ({"expected_revision": "one"}, "expected_revision"),
    ],
)
async def test_bad_fields_are_422_and_change_nothing(
    client: httpx.AsyncClient, engine: Engine, body: dict[str, Any], path: str
) -> None:
    task_id = await insert_task(engine)
    response = await client.patch(f"{TASKS}/{task_id}", json=body)
    assert error_code(response, 422) == "task_invalid"
    assert response.json()["error"]["details"]["errors"][0]["path"] == path
    assert (await client.get(f"{TASKS}/{task_id}")).json()["revision"] == 0


@pytest.mark.parametrize(
    "params",
    [
        {"status": "done"},
        {"limit": 0},
        {"limit": 501},
        {"due_before": "2026-01-01T00:00:00"},
        {"due_after": "soon"},
        {"run_id": "nope"},
        {"after": "nope"},
    ],
)
async def test_bad_filters_are_422(client: httpx.AsyncClient, params: dict[str, Any]) -> None:
    assert error_code(await client.get(TASKS, params=params), 422) == "invalid_request"


async def test_a_non_object_body_is_refused(client: httpx.AsyncClient, engine: Engine) -> None:
    task_id = await insert_task(engine)
    response = await client.patch(f"{TASKS}/{task_id}", json=["status", "completed"])
    assert response.status_code == 422


async def test_cli_lists_shows_updates_and_completes(engine: Engine, database_url: str) -> None:
    env = cli_env(database_url)
    task_id = await insert_task(engine, assignee="ada")
    listed = invoke_cli(["tasks", "list", "--assignee", "ada"], env)
    assert listed.returncode == 0 and task_id in listed.stdout, listed.stdout + listed.stderr
    dated = invoke_cli(["tasks", "list", "--due-after", "2000-01-01T00:00:00Z"], env)
    assert dated.returncode == 0 and task_id not in dated.stdout, "a task without a due date is left out"
    assert invoke_cli(["tasks", "list", "--due-after", "soon"], env).returncode == 2
    shown = invoke_cli(["tasks", "show", task_id], env)
    assert shown.returncode == 0 and "Call Acme" in shown.stdout
    updated = invoke_cli(["tasks", "update", task_id, "--assignee", "bo", "--metadata", '{"crm": 1}'], env)
    assert updated.returncode == 0, updated.stderr
    assert "task.updated" in updated.stdout and f"task:{task_id}:1" in updated.stdout
    cleared = invoke_cli(["tasks", "update", task_id, "--assignee", ""], env)
    assert cleared.returncode == 0 and '"bo" -> null' in cleared.stdout, cleared.stdout
    done = invoke_cli(["tasks", "complete", task_id], env)
    assert done.returncode == 0 and "task.completed" in done.stdout
    again = invoke_cli(["tasks", "complete", task_id], env)
    assert again.returncode == 0 and "nothing changed" in again.stdout
    bad = invoke_cli(["tasks", "update", task_id, "--status", "done"], env)
    assert bad.returncode == 1 and "task_invalid" in bad.stderr
    missing = invoke_cli(["tasks", "show", "nope"], env)
    assert missing.returncode == 1 and "task_not_found" in missing.stderr
    assert (await engine.tasks.get(task_id)).revision == 3
