"""Key roles and workspaces (issue 15): ``viewer`` keys read, ``operator`` keys also run things,
``admin`` keys also manage keys, credentials, people, budgets and the workspace; workspaces are
created (with a first admin key), listed and renamed through the API and the CLI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.api.route_table import api_routes
from agentflow.core.roles import required_role
from agentflow.engine import Engine
from tests.support.cli import cli_env, run_cli

FLOW = {"name": "hello", "kind": "structured", "nodes": [{"id": "done", "type": "finish", "output": "hi"}]}


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    # auth "required": a request without a key is refused, so every call below is a key's.
    transport = httpx.ASGITransport(app=create_app(engine, auth="required"))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


async def key(engine: Engine, role: Any, workspace: Any = None) -> dict[str, str]:
    extra = {"workspace_id": workspace} if workspace is not None else {}
    _, token = await engine.keys.create("api", f"{role} key", role=role, **extra)
    return {"Authorization": f"Bearer {token}"}


async def test_each_role_may_do_what_it_is_for_and_no_more(engine: Engine, api: httpx.AsyncClient) -> None:
    await engine.publish_workflow(FLOW)
    viewer, operator, admin = [await key(engine, role) for role in ("viewer", "operator", "admin")]
    # Reads: everyone.
    for who in (viewer, operator, admin):
        assert (await api.get("/api/ai/workflows", headers=who)).status_code == 200
    # Running things: operators and admins.
    refused = await api.post("/api/ai/workflows/hello/runs", json={"payload": {}}, headers=viewer)
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["code"] == "role_forbidden" and error["details"] == {"role": "viewer", "needed": "operator"}
    assert "operator role or above" in error["message"] and "--role" in error["solution"]
    for who in (operator, admin):
        started = await api.post("/api/ai/workflows/hello/runs", json={"payload": {}}, headers=who)
        assert started.status_code in (200, 201), started.text
    # Managing the workspace: admins only, and only admins see the keys.
    for who in (viewer, operator):
        made = await api.post("/api/keys", json={"kind": "api", "name": "x"}, headers=who)
        assert made.status_code == 403 and made.json()["error"]["details"]["needed"] == "admin"
        assert (await api.get("/api/keys", headers=who)).status_code == 403
        people = await api.put("/api/people/lee", json={"email": "lee@example.com"}, headers=who)
        assert people.status_code == 403
    made = await api.post("/api/keys", json={"kind": "api", "name": "ci", "role": "viewer"}, headers=admin)
    assert made.status_code == 201 and made.json()["role"] == "viewer"
    listed = {k["name"]: k["role"] for k in (await api.get("/api/keys", headers=admin)).json()["keys"]}
    assert listed["ci"] == "viewer" and listed["operator key"] == "operator"
    assert (await api.get("/api/people", headers=viewer)).status_code == 200, "reading people is a viewer's"


async def test_a_viewer_cannot_fire_a_private_trigger(engine: Engine, api: httpx.AsyncClient) -> None:
    await engine.publish_workflow(FLOW)
    viewer = await key(engine, "viewer")
    fired = await api.post("/api/private/trigger/hello", json={}, headers=viewer)
    assert fired.status_code == 403 and fired.json()["error"]["code"] == "role_forbidden"
    operator = await key(engine, "operator")
    assert (await api.post("/api/private/trigger/hello", json={}, headers=operator)).status_code in (
        200,
        201,
        202,
    )


def test_every_write_route_needs_at_least_an_operator_and_admin_routes_an_admin(engine: Engine) -> None:
    app = create_app(engine)
    entries = api_routes(app.routes)
    assert len(entries) > 60, "every route is walked, however FastAPI nests included routers"
    for entry in entries:
        path = entry.path
        if not path.startswith("/api/") or path.startswith("/api/public"):
            continue
        for method in entry.methods - {"HEAD", "OPTIONS"}:
            needed = required_role(method, path)
            if method == "GET":
                assert needed == ("admin" if path.startswith("/api/keys") else "viewer"), path
            else:
                assert needed in ("operator", "admin"), (method, path)


async def test_workspaces_are_created_with_an_admin_key_listed_and_renamed(
    engine: Engine, api: httpx.AsyncClient
) -> None:
    root = await key(engine, "admin")
    created = await api.post("/api/workspaces", json={"name": "acme support"}, headers=root)
    assert created.status_code == 201, created.text
    acme = created.json()
    acme_key = {"Authorization": f"Bearer {acme['api_key']}"}
    mine = await api.get("/api/workspaces", headers=acme_key)
    assert [w["name"] for w in mine.json()["workspaces"]] == ["acme support"], "a key sees its own"
    every = [w["name"] for w in (await api.get("/api/workspaces", headers=root)).json()["workspaces"]]
    assert "acme support" in every and len(every) >= 2, "the default workspace's admins see all"
    # The new key acts in the new workspace only.
    assert (await api.post("/api/ai/workflows", json=FLOW, headers=acme_key)).status_code in (200, 201)
    assert [w.name for w in await engine.list_workflows(workspace_id=acme["id"])] == ["hello"]
    refused = await api.post("/api/workspaces", json={"name": "sneaky"}, headers=acme_key)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "not_server_admin"
    renamed = await api.patch(f"/api/workspaces/{acme['id']}", json={"name": "acme"}, headers=acme_key)
    assert renamed.status_code == 200 and renamed.json()["name"] == "acme"
    taken = await api.post("/api/workspaces", json={"name": "acme"}, headers=root)
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "workspace_name_taken"
    default_id = next(w["id"] for w in (await api.get("/api/workspaces", headers=root)).json()["workspaces"]
                      if w["name"] != "acme")  # fmt: skip
    foreign = await api.patch(f"/api/workspaces/{default_id}", json={"name": "mine now"}, headers=acme_key)
    assert foreign.status_code == 404, "another tenant's workspace does not exist for this key"
    viewer = await key(engine, "viewer", acme["id"])
    assert (
        await api.patch(f"/api/workspaces/{acme['id']}", json={"name": "v"}, headers=viewer)
    ).status_code == 403


def test_the_cli_creates_lists_and_renames_workspaces(database_url: str) -> None:
    env = cli_env(database_url)
    made = run_cli(["workspaces", "create", "cli team"], env)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "afk_" in made.stdout
    workspace_id = made.stdout.split("created workspace ", 1)[1].split(" ", 1)[0]
    renamed = run_cli(["workspaces", "rename", workspace_id, "cli crew"], env)
    assert renamed.returncode == 0 and "cli crew" in renamed.stdout
    listed = run_cli(["workspaces", "list"], env)
    assert "cli crew" in listed.stdout
    bad = run_cli(["workspaces", "rename", "not-a-uuid", "x"], env)
    assert bad.returncode == 2 and "workspace_invalid" in bad.stdout
    made_key = run_cli(["keys", "create", "reader", "--role", "viewer"], env)
    assert made_key.returncode == 0 and "viewer" in made_key.stdout
    wrong = run_cli(["keys", "create", "x", "--role", "root"], env)
    assert wrong.returncode == 2 and "key_invalid" in wrong.stdout
