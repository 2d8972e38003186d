"""S5 (RELIABILITY.md): the cross-workspace matrix. Workspace A holds one of every kind of
thing the API names by id; workspace B's admin key then sends every method of every route that
takes an id with A's ids, and reads every list. Every foreign id is a 404 (upserts by name
create B's own), no answer carries A's data, and A's rows are byte-for-byte unchanged.

The routes are walked from the app itself: a new route with an id parameter this test cannot
fill fails it until it is added here."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.api.route_table import RouteEntry, api_routes
from agentflow.core.audit import action_for
from agentflow.core.roles import required_role
from agentflow.engine import Engine
from tests.conftest import make_settings
from tests.integration.test_tasks_api import insert_task
from tests.support.agents import agent_workflow, calls, replies, running_worker, until

MARK = "alpha-secret"
"""In the name of everything in workspace A (the ids in paths): no list answered to B may
contain it (a 404 quotes the id it was sent)."""
CONTENT = "zq-private-content"
"""In every text of workspace A that no path names: no answer to B may contain it."""

BODIES: dict[tuple[str, str], Any] = {
    ("PATCH", "/api/ai/workflows/{workflow_id}"): {"enabled": False},
    ("POST", "/api/ai/workflows/{workflow_id}/rollback"): {"version": 1},
    ("POST", "/api/ai/workflows/{workflow_id}/runs"): {"payload": {}},
    ("POST", "/api/ai/workflows/{workflow_id}/runs/migrate"): {},
    ("POST", "/api/ai/workflows/{workflow_id}/runs/{run_id}/rerun"): {"from_step": 1},
    ("PUT", "/api/accounts/{account_id}"): {"name": "B's own account"},
    ("PUT", "/api/ai/workflows/{workflow_id}/webhook-secret"): {"secret": "whsec_" + "A" * 32},
    ("PATCH", "/api/workspaces/{workspace_id}"): {"name": "taken over"},
    ("PUT", "/api/credentials/{name}"): {"kind": "bearer", "token": "b-own-secret"},
    ("POST", "/api/credentials/{name}/oauth2/callback"): {"code": "x"},
    ("POST", "/api/credentials/{name}/oauth2/authorize"): {},
    ("PATCH", "/api/tasks/{task_id}"): {"status": "in_progress"},
    ("POST", "/api/approvals/{approval_id}/approve"): {},
    ("POST", "/api/approvals/{approval_id}/reject"): {"reason": "no"},
    ("POST", "/api/runs/{run_id}/resume"): {"add": {"tokens": 1000}},
    ("POST", "/api/requests/{request_id}/respond"): {"approved": True},
    ("PUT", "/api/people/{handle}"): {"email": "b-own@example.com"},
    ("POST", "/api/employees/{name}/messages"): {"message": "hello"},
    ("POST", "/v2/workflows/{workflow_id}/execute"): {"trigger_data": {}},
    ("POST", "/v2/executions/{execution_id}/resume"): {
        "node_id": "agent",
        "user_response": {"approved": True},
    },
}
UPSERTS = {
    ("PUT", "/api/accounts/{account_id}"),
    ("PUT", "/api/people/{handle}"),
    ("PUT", "/api/credentials/{name}"),
}
"""Routes that create the named thing when it is absent: B's call makes B's own (ids are names
within a workspace), which must leave A's untouched."""
FILTERS = {
    ("GET", "/api/accounts/{account_id}/events"),
    ("GET", "/api/resources/{kind}/{name}/references"),
}
"""Routes whose path value is a filter, not an id: events tagged with an account id, the
workflows that reference a name. Either answer is fine (an empty list, or 404) without A's data."""
ENDLESS = {("GET", "/api/runs/stream")}
"""A live list never ends (this in-process client waits for a whole body): another workspace
following it sees none of A's runs in ``test_run_list_stream``."""
SKIPPED_PREFIXES = ("/api/public/", "/mcp")
"""Token-authenticated routes (a link, a trigger or a reply token names its workspace itself)
are tested with their tokens elsewhere."""


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[Engine]:
    settings = make_settings(database_url, secret_key=base64.b64encode(os.urandom(32)).decode())
    eng = await Engine.connect(settings, migrate_schema=False)
    yield eng
    await eng.close()


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine, auth="required"))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


async def workspace(api: httpx.AsyncClient, root: dict[str, str], name: str) -> tuple[UUID, dict[str, str]]:
    created = await api.post("/api/workspaces", json={"name": name}, headers=root)
    assert created.status_code == 201, created.text
    return UUID(created.json()["id"]), {"Authorization": f"Bearer {created.json()['api_key']}"}


async def fill_workspace_a(
    engine: Engine, api: httpx.AsyncClient, a: UUID, key: dict[str, str]
) -> dict[str, str]:
    """One of everything in A; the path values that name them."""
    agent = agent_workflow(f"{MARK}-agent", approvals=["create_task"])
    assert (await api.post("/api/ai/workflows", json=agent, headers=key)).status_code == 201
    employee = {
        "name": f"{MARK}-employee",
        "kind": "employee",
        "title": CONTENT,
        "prompt": f"You are {CONTENT}.",
    }
    assert (await api.post("/api/ai/workflows", json=employee, headers=key)).status_code == 201
    model = replies(calls(("create_task", {"title": f"{CONTENT} task"})))
    async with running_worker(engine, model=model):
        started = await api.post(
            f"/api/ai/workflows/{MARK}-agent/runs", json={"payload": {"note": CONTENT}}, headers=key
        )
        assert started.status_code == 201, started.text
        run_id = UUID(started.json()["id"])
        await until(engine, run_id, lambda r: r.status_reason == "awaiting_approval", workspace_id=a)
    (request,) = await engine.requests.list(run_id=run_id, workspace_id=a)
    assert (await api.put(f"/api/accounts/{MARK}-acct", json={"name": CONTENT}, headers=key)).status_code in (
        200,
        201,
    )
    cred = {"name": f"{MARK}-cred", "kind": "bearer", "token": CONTENT}
    assert (await api.post("/api/credentials", json=cred, headers=key)).status_code == 201
    assert (
        await api.put(f"/api/people/{MARK}-lee", json={"email": f"{CONTENT}@example.com"}, headers=key)
    ).status_code in (
        200,
        201,
    )
    document = await api.post(
        "/api/knowledge", json={"title": MARK, "body": f"# {MARK}\n\n{MARK} {CONTENT}."}, headers=key
    )
    assert document.status_code == 201, document.text
    made = await api.post("/api/keys", json={"kind": "api", "name": f"{MARK}-key"}, headers=key)
    task = await insert_task(engine, a, title=f"{CONTENT} call back", run_id=run_id)
    await engine.db.pool.execute(
        "INSERT INTO memory_messages (workspace_id, namespace, memory_key, run_id, step_seq, role, content,"
        " expires_at) VALUES ($1, $2, $3, $4, 1, 'user', $5, now() + interval '1 day')",
        a, f"{MARK}-agent", f"{MARK}-key", run_id, CONTENT,
    )  # fmt: skip
    return {
        "workflow_id": f"{MARK}-agent",
        "workflow": f"{MARK}-agent",
        "version": "1",
        "before": "1",
        "after": "latest",
        "run_id": str(run_id),
        "execution_id": str(run_id),
        "request_id": str(request["id"]),
        "approval_id": str(request["id"]),
        "account_id": f"{MARK}-acct",
        "key_id": made.json()["id"],
        "workspace_id": str(a),
        "name": f"{MARK}-cred",
        "task_id": task,
        "document_id": document.json()["id"],
        "handle": f"{MARK}-lee",
        "kind": "credential",
    }


QUERIES = {"q": MARK, "scenario": MARK, "namespace": f"{MARK}-agent", "key": f"{MARK}-key"}


def path_of(template: str, values: dict[str, str], route: str) -> str:
    path = template
    if "/api/employees/{name}" in route:
        values = {**values, "name": f"{MARK}-employee"}
    for name, value in values.items():
        path = path.replace("{" + name + "}", value)
    assert "{" not in path, f"S5 cannot fill {template}: add its parameter to fill_workspace_a"
    return path


async def digest(engine: Engine, a: UUID, ignoring: frozenset[str] = frozenset()) -> dict[str, str]:
    """A hash of every row of workspace A, table by table (but those ``ignoring`` names)."""
    tables = await engine.db.pool.fetch(
        "SELECT table_name FROM information_schema.columns WHERE column_name = 'workspace_id'"
        " AND table_schema = 'public' ORDER BY table_name"
    )
    found = {}
    for row in tables:
        table = row["table_name"]
        if table in ignoring:
            continue
        found[table] = await engine.db.pool.fetchval(
            f"SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM {table} t"
            " WHERE workspace_id = $1",
            a,
        )
    workspaces = await engine.db.pool.fetchval("SELECT row(w.*)::text FROM workspaces w WHERE id = $1", a)
    found["workspaces"] = workspaces
    return found


@pytest.mark.timeout(180)
async def test_no_route_lets_one_workspace_reach_another(engine: Engine, api: httpx.AsyncClient) -> None:
    _, root = await engine.keys.create("api", "root", role="admin")
    root_key = {"Authorization": f"Bearer {root}"}
    a, a_key = await workspace(api, root_key, f"{MARK}-workspace")
    b, b_key = await workspace(api, root_key, "tenant-b")
    values = await fill_workspace_a(engine, api, a, a_key)
    a_ids = {v for k, v in values.items() if k.endswith("_id") and k != "workflow_id"}
    before = await digest(engine, a)

    tried: list[str] = []
    problems: list[str] = []
    routes = [e for e in api_routes(create_app(engine).routes) if not e.path.startswith(SKIPPED_PREFIXES)]
    calls: list[tuple[str, RouteEntry]] = [
        (m, e)
        for e in routes
        for m in sorted(e.methods - {"HEAD", "OPTIONS"})
        if ("{" in e.path or m == "GET") and (m, e.path) not in ENDLESS
    ]  # a write naming nothing acts in B's own workspace
    # Lists first (B's own audit log then holds nothing of A's names), upserts last (B's PUT
    # creates B's own, which a DELETE of the same name would then find).
    calls.sort(key=lambda call: ("{" in call[1].path, (call[0], call[1].path) in UPSERTS))
    for method, entry in calls:
        path = path_of(entry.path, values, entry.path)
        params = {
            k: v for k, v in QUERIES.items() if any(p.name == k for p in entry.route.dependant.query_params)
        }
        body = BODIES.get((method, entry.path))
        answer = await api.request(method, path, params=params, json=body, headers=b_key)
        where = f"{method} {path}"
        tried.append(where)
        text = answer.text
        leaked = CONTENT in text
        if "{" not in entry.path:
            leaked = leaked or any(i in text for i in a_ids) or (not params and MARK in text)
            expected: tuple[int, ...] = (200, 404) if params else (200,)
        elif (method, entry.path) in UPSERTS:
            expected = (200, 201)
        elif (method, entry.path) in FILTERS:
            expected = (200, 404)
        else:
            expected = (404,)
        if leaked or answer.status_code not in expected:
            problems.append(f"{where}: {answer.status_code} {text[:300]}")
    assert problems == [], "\n".join(problems)
    assert len(tried) > 70
    assert await digest(engine, a) == before, "B changed nothing of A's"

    # The controls: A's own key reaches each of these ids (so B's 404s are about the workspace).
    for entry in routes:
        if "{" in entry.path and "GET" in entry.methods:
            path = path_of(entry.path, values, entry.path)
            params = {
                k: v
                for k, v in QUERIES.items()
                if any(p.name == k for p in entry.route.dependant.query_params)
            }
            if entry.path.endswith("/stream"):
                continue  # a stream stays open while the run waits
            own = await api.get(path, params=params, headers=a_key)
            assert own.status_code == 200, (path, own.text)
    assert b != a


@pytest.mark.timeout(180)
async def test_every_write_refuses_a_role_below_its_own(engine: Engine, api: httpx.AsyncClient) -> None:
    """Roles on every write route, with the workspace's own ids: a viewer's key is refused on
    each (403 ``role_forbidden``), an operator's on each admin route, and nothing changes."""
    _, root = await engine.keys.create("api", "root", role="admin")
    a, a_key = await workspace(api, {"Authorization": f"Bearer {root}"}, f"{MARK}-workspace")
    values = await fill_workspace_a(engine, api, a, a_key)
    keys = {}
    for role in ("viewer", "operator"):
        made = await api.post("/api/keys", json={"kind": "api", "name": role, "role": role}, headers=a_key)
        keys[role] = {"Authorization": f"Bearer {made.json()['key']}"}
    # The keys' last use and the audit log change: each refusal is recorded (below).
    kept = frozenset({"access_keys", "audit_log"})
    before = await digest(engine, a, kept)
    routes = [e for e in api_routes(create_app(engine).routes) if not e.path.startswith(SKIPPED_PREFIXES)]
    problems: list[str] = []
    tried = 0
    for entry in routes:
        for method in sorted(entry.methods - {"GET", "HEAD", "OPTIONS"}):
            needed = required_role(method, entry.path)
            below = "viewer" if needed == "operator" else "operator"
            for role in ("viewer", below):
                path = path_of(entry.path, values, entry.path)
                params = {
                    k: v
                    for k, v in QUERIES.items()
                    if any(p.name == k for p in entry.route.dependant.query_params)
                }
                answer = await api.request(
                    method, path, params=params, json=BODIES.get((method, entry.path)), headers=keys[role]
                )
                tried += 1
                code = answer.json().get("error", {}).get("code") if answer.content else None
                if answer.status_code != 403 or code != "role_forbidden":
                    problems.append(f"{role} {method} {path}: {answer.status_code} {answer.text[:200]}")
    assert tried > 60
    assert problems == [], "\n".join(problems)
    assert await digest(engine, a, kept) == before, "no refused write changed anything"
    refused = await engine.db.pool.fetchval(
        "SELECT count(*) FROM audit_log WHERE workspace_id = $1 AND status = 403 AND role IN ('viewer', 'operator')",
        a,
    )
    audited = sum(1 for e in routes for m in e.methods - {"GET", "HEAD", "OPTIONS"} if action_for(m, e.path))
    assert refused == 2 * audited, "each refused audited write is in the audit log"
