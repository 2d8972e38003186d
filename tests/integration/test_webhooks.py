"""Webhook triggers through a real server: public (trigger key, Standard Webhooks signatures)
and private (API key) calls, idempotent replays, keys, API authentication."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import standardwebhooks

from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.conftest import make_settings
from tests.support.http_server import error_code, serve

WF = "/api/ai/workflows"
SECRET_KEY = base64.b64encode(os.urandom(32)).decode()
OTHER_WORKSPACE = uuid.UUID("00000000-0000-0000-0000-0000000000b2")


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[Engine]:
    eng = await Engine.connect(make_settings(database_url, secret_key=SECRET_KEY), migrate_schema=False)
    await eng.db.pool.execute("INSERT INTO workspaces (id, name) VALUES ($1, 'b')", OTHER_WORKSPACE)
    yield eng
    await eng.close()


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        yield http


def hook(name: str, **trigger: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": name,
        "kind": "structured",
        "nodes": [{"id": "done", "type": "finish", "output": {"got": "{{ payload.n }}"}}],
    }
    if trigger:
        config["trigger"] = trigger
    return config


async def make_key(client: httpx.AsyncClient, kind: str, **headers: str) -> str:
    response = await client.post("/api/keys", json={"kind": kind, "name": f"{kind} key"}, headers=headers)
    assert response.status_code == 201, response.text
    return str(response.json()["key"])


async def test_public_trigger_starts_a_run_once_per_request_id(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    published = await engine.publish_workflow(hook("inbound"))
    key = await make_key(client, "trigger")
    url = f"/api/public/trigger/{key}/{published.workflow.id}"
    first = await client.post(url, json={"n": 1, "account_id": "acme"}, headers={"Idempotency-Key": "req-1"})
    assert first.status_code == 202, first.text
    body = first.json()
    assert body["decision"] == "started" and body["replayed"] is False and body["debounced"] is False
    assert body["reason"] is None, "public callers do not see the workflow's conditions"
    assert body["event"] == {"topic": f"webhook.{published.workflow.id}", "message_id": "req-1"}
    again = await client.post(url, json={"n": 2}, headers={"Idempotency-Key": "req-1"})
    assert again.status_code == 200 and again.json()["replayed"] is True
    assert again.json()["run_id"] == body["run_id"], "a retried call answers with the original run"
    runs = await engine.list_runs(workflow="inbound")
    assert len(runs) == 1 and runs[0].input == {"n": 1, "account_id": "acme"}
    stored = await engine.db.pool.fetchrow("SELECT trigger, input FROM runs WHERE id = $1", runs[0].id)
    assert stored["trigger"]["source"] == "public" and stored["trigger"]["event"]["message_id"] == "req-1"
    shown = (await client.get(f"{WF}/inbound/runs/{body['run_id']}")).json()
    assert shown["trigger"]["source"] == "public", "the API shows what started a run"
    # The call is an event of the log too: the account view sees it.
    seen = await engine.events.for_account("acme", since_seconds=60, sources=["webhook"])
    assert [e.message_id for e in seen] == ["req-1"]
    # Without an id every call is new; by name works as well as by id.
    by_name = await client.post(f"/api/public/trigger/{key}/inbound", json={"n": 3})
    header = await client.post(
        f"/api/public/trigger/{published.workflow.id}",
        json={"n": 4},
        headers={"X-Agentflow-Trigger-Key": key},
    )
    assert (by_name.status_code, header.status_code) == (202, 202)
    assert len(await engine.list_runs(workflow="inbound")) == 3
    run = await engine.wait_for_run(body["run_id"], timeout=0.01)
    assert run.status.value == "created", "nothing ran it: no worker in this test"


@pytest.mark.parametrize("where", ["path", "header"])
async def test_public_trigger_refuses_bad_keys_before_revealing_workflows(
    client: httpx.AsyncClient, engine: Engine, where: str
) -> None:
    published = await engine.publish_workflow(hook("guarded"))
    api_key = await make_key(client, "api")
    trigger_key = await make_key(client, "trigger")

    async def call(key: str, workflow: str = str(published.workflow.id)) -> httpx.Response:
        if where == "path":
            return await client.post(f"/api/public/trigger/{key}/{workflow}", json={})
        return await client.post(
            f"/api/public/trigger/{workflow}", json={}, headers={"X-Agentflow-Trigger-Key": key}
        )

    forged = trigger_key[:-4] + ("AAAA" if not trigger_key.endswith("AAAA") else "BBBB")
    for bad in ("nope", api_key, forged, "aft_" + "0" * 16 + "_" + "x" * 43, "k" * 10_000):
        response = await call(bad)
        assert error_code(response, 401) == "unauthorized", bad[:30]
        assert response.headers["www-authenticate"] == "Bearer"
    assert error_code(await call(trigger_key, str(uuid.uuid4())), 404) == "workflow_not_found"
    assert error_code(await call(trigger_key, "x" * 10_000), 404) == "workflow_not_found"
    key_id = trigger_key.split("_")[1]
    assert (await client.delete(f"/api/keys/{key_id}")).status_code == 200
    assert error_code(await call(trigger_key), 401) == "unauthorized", "a revoked key stops working at once"
    assert await engine.db.pool.fetchval("SELECT count(*) FROM events") == 0, "refused calls store nothing"


async def test_private_trigger_needs_an_api_key_of_the_workflows_workspace(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    published = await engine.publish_workflow(hook("private"))
    await engine.publish_workflow(hook("private"), workspace_id=OTHER_WORKSPACE)
    url = f"/api/private/trigger/{published.workflow.id}"
    assert error_code(await client.post(url, json={}), 401) == "unauthorized"
    trigger_key = await make_key(client, "trigger")
    assert error_code(await client.post(url, json={}, headers=bearer(trigger_key)), 401) == "unauthorized"
    key = await make_key(client, "api")
    started = await client.post(url, json={"n": 5}, headers=bearer(key))
    assert started.status_code == 202, started.text
    assert started.json()["decision"] == "started" and started.json()["reason"] == {"conditions": None}
    other_key = await make_key(client, "api", **{"X-Agentflow-Workspace": str(OTHER_WORKSPACE)})
    foreign = await client.post(url, json={}, headers=bearer(other_key))
    assert error_code(foreign, 404) == "workflow_not_found", "another workspace's key cannot see it"
    by_name = await client.post("/api/private/trigger/private", json={}, headers=bearer(other_key))
    assert by_name.status_code == 202
    other_runs = await engine.list_runs(workspace_id=OTHER_WORKSPACE)
    assert [str(r.id) for r in other_runs] == [by_name.json()["run_id"]]
    trigger = await engine.db.pool.fetchval("SELECT trigger FROM runs WHERE id = $1", other_runs[0].id)
    assert trigger["source"] == "private"


async def test_signed_public_triggers(client: httpx.AsyncClient, engine: Engine) -> None:
    published = await engine.publish_workflow(hook("signed"))
    key = await make_key(client, "trigger")
    url = f"/api/public/trigger/{key}/signed"
    assert (await client.post(url, json={"n": 0})).status_code == 202, "no secret: no signature needed"
    rotated = await client.put(f"{WF}/signed/webhook-secret")
    assert rotated.status_code == 201
    secret = rotated.json()["secret"]
    assert secret.startswith("whsec_")
    sealed = await engine.db.pool.fetchval("SELECT ciphertext FROM webhook_secrets")
    assert secret.encode() not in sealed and secret[6:].encode() not in sealed, "encrypted at rest"
    signer = standardwebhooks.Webhook(secret)  # the vendor's SDK, as a sender uses it
    body = '{"n": 1, "account_id": "acme"}'

    def signed(msg_id: str, at: datetime, content: str = body, sign: str = body) -> dict[str, str]:
        return {
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": signer.sign(msg_id, at, sign),
            "content-type": "application/json",
        }

    now = datetime.now(UTC)
    assert error_code(
        await client.post(url, content=body, headers={"content-type": "application/json"}), 401
    ) == ("signature_missing")
    cases = {
        "tampered body": signed("m1", now, sign='{"n": 2}'),
        "too old": signed("m1", now - timedelta(seconds=330)),
        "too new": signed("m1", now + timedelta(seconds=330)),
        "other secret": {
            **signed("m1", now),
            "webhook-signature": standardwebhooks.Webhook(
                "whsec_" + base64.b64encode(b"y" * 24).decode()
            ).sign("m1", now, body),
        },
        "garbage": {**signed("m1", now), "webhook-signature": "v1,@@@ nonsense"},
        "bad timestamp": {**signed("m1", now), "webhook-timestamp": "1e400"},
    }
    for what, headers in cases.items():
        response = await client.post(url, content=body, headers=headers)
        assert error_code(response, 401) == "signature_invalid", what
    ok = await client.post(url, content=body, headers=signed("msg_2f9", now - timedelta(seconds=250)))
    assert ok.status_code == 202, ok.text
    assert ok.json()["event"]["message_id"] == "msg_2f9", "the webhook id is the message id"
    replay = await client.post(url, content=body, headers=signed("msg_2f9", now))
    assert replay.status_code == 200 and replay.json()["run_id"] == ok.json()["run_id"]
    assert len(await engine.list_runs(workflow="signed")) == 2
    # Rotating invalidates the old secret; removing it stops requiring signatures.
    await client.put(f"{WF}/signed/webhook-secret")
    assert (
        error_code(await client.post(url, content=body, headers=signed("m3", now)), 401)
        == "signature_invalid"
    )
    assert (await client.delete(f"{WF}/signed/webhook-secret")).status_code == 204
    assert (await client.post(url, json={"n": 9})).status_code == 202
    assert published.workflow.id is not None


async def test_a_secret_sealed_under_another_key_is_reported_not_crashed(
    engine: Engine, database_url: str
) -> None:
    await engine.publish_workflow(hook("rekeyed"))
    workflow = await engine.get_workflow("rekeyed")
    await engine.webhooks.rotate_secret(workflow.id, workspace_id=workflow.workspace_id)
    other = await Engine.connect(
        make_settings(database_url, secret_key=base64.b64encode(os.urandom(32)).decode()),
        migrate_schema=False,
    )
    try:
        async with serve(create_app(other)) as base, httpx.AsyncClient(base_url=base) as http:
            key = (await http.post("/api/keys", json={"kind": "trigger", "name": "k"})).json()["key"]
            headers = {"webhook-id": "a", "webhook-timestamp": "1", "webhook-signature": "v1,AAAA"}
            response = await http.post(f"/api/public/trigger/{key}/rekeyed", json={}, headers=headers)
            assert error_code(response, 409) == "secret_unreadable"
    finally:
        await other.close()


async def test_trigger_bodies_are_checked_and_nothing_is_half_written(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await engine.publish_workflow(
        {
            **hook("typed"),
            "payload_format": {"n": "number", "account_id": {"type": "string", "required": False}},
        }
    )
    await engine.publish_workflow(hook("off"), enabled=False)
    key = await make_key(client, "api")
    url = "/api/private/trigger/typed"
    cases: list[tuple[Any, dict[str, str], int, str]] = [
        ({"n": "one"}, {}, 422, "payload_invalid"),
        ([1, 2], {}, 422, "payload_invalid"),
        ({"n": 1}, {"Idempotency-Key": "x" * 10_000}, 422, "request_id_invalid"),
        ({"n": 1}, {"Idempotency-Key": "has space"}, 422, "request_id_invalid"),
    ]
    for body, headers, status, code in cases:
        response = await client.post(url, json=body, headers={**bearer(key), **headers})
        assert error_code(response, status) == code, (body, headers)
    hostile = [
        ('{"n": 1e400}', 400, "number_out_of_range"),
        ('{"n": "\\u0000"}', 400, "unstorable_text"),
        ('{"n": "\\ud800"}', 400, "unstorable_text"),
        ("[" * 100 + "]" * 100, 400, "too_deep"),
        ('{"n": 1', 400, "invalid_json"),
        ('{"n": "' + "x" * (2 * 1024 * 1024) + '"}', 413, "body_too_large"),
    ]
    for raw, status, code in hostile:
        for target in (url, "/api/public/trigger/" + "aft_" + "0" * 16 + "_" + "x" * 43 + "/typed"):
            response = await client.post(
                target, content=raw, headers={**bearer(key), "content-type": "application/json"}
            )
            assert error_code(response, status) == code, (raw[:20], target[:30])
    off = await client.post("/api/private/trigger/off", json={}, headers=bearer(key))
    assert error_code(off, 409) == "workflow_disabled"
    assert await engine.db.pool.fetchval("SELECT count(*) FROM events") == 0
    assert await engine.db.pool.fetchval("SELECT count(*) FROM runs") == 0
    ok = await client.post(url, json={"n": 1}, headers=bearer(key))
    assert ok.status_code == 202, ok.text


async def test_webhook_calls_follow_the_triggers_mode_and_conditions(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await engine.publish_workflow(
        hook(
            "restarting",
            mode="restart",
            enrollment={"key": "{{ event.data.ticket }}"},
            conditions={"all": [{"path": "data.priority", "op": "one_of", "value": ["high", "urgent"]}]},
        )
    )
    key = await make_key(client, "api")
    url = "/api/private/trigger/restarting"
    low = await client.post(url, json={"ticket": "T1", "priority": "low"}, headers=bearer(key))
    assert low.json()["decision"] == "not_matched" and low.json()["reason"]["conditions"]["matched"] is False
    first = await client.post(url, json={"ticket": "T1", "priority": "high"}, headers=bearer(key))
    second = await client.post(url, json={"ticket": "T1", "priority": "urgent"}, headers=bearer(key))
    assert (first.json()["decision"], second.json()["decision"]) == ("started", "restarted")
    assert second.json()["reason"]["canceled_run"] == first.json()["run_id"]
    old = await engine.get_run(first.json()["run_id"])
    assert (old.status.value, old.status_reason) == ("canceled", "restarted_by_event")
    decisions = await client.get(f"{WF}/restarting/decisions")
    assert [d["decision"] for d in decisions.json()["decisions"]] == ["restarted", "started", "not_matched"]


async def test_keys_api_shows_a_token_once_and_auth_can_be_required(engine: Engine) -> None:
    async with (
        serve(create_app(engine, auth="required")) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        response = await http.get(WF)
        assert error_code(response, 401) == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
        assert (
            error_code(await http.post("/api/keys", json={"kind": "api", "name": "x"}), 401) == "unauthorized"
        )
        assert (await http.get("/healthz")).status_code == 200, "health stays open"
        record, token = await engine.keys.create("api", "bootstrap", workspace_id=OTHER_WORKSPACE)
        listed = await http.get("/api/keys", headers=bearer(token))
        assert listed.status_code == 200
        assert [k["id"] for k in listed.json()["keys"]] == [record["id"]]
        assert "key" not in listed.json()["keys"][0] and "secret_hash" not in listed.json()["keys"][0]
        mismatch = await http.get(WF, headers={**bearer(token), "X-Agentflow-Workspace": str(uuid.uuid4())})
        assert error_code(mismatch, 403) == "workspace_mismatch"
        same = await http.get(WF, headers={**bearer(token), "X-Agentflow-Workspace": str(OTHER_WORKSPACE)})
        assert same.status_code == 200
        await engine.publish_workflow(hook("theirs"))  # the default workspace's
        mine = await http.get(WF, headers=bearer(token))
        assert mine.json()["workflows"] == [], "a key sees only its own workspace"
        assert error_code(await http.get(WF, headers={"Authorization": "Bearer nope"}), 401) == "unauthorized"
        assert error_code(await http.get(WF, headers={"Authorization": "Basic abc"}), 401) == "unauthorized"
        assert error_code(
            await http.post("/api/keys", json={"kind": "root", "name": "x"}, headers=bearer(token)), 422
        )
        assert (
            error_code(await http.delete("/api/keys/" + "z" * 500, headers=bearer(token)), 404)
            == "key_not_found"
        )
        revoked = await http.delete(f"/api/keys/{record['id']}", headers=bearer(token))
        assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
        assert error_code(await http.get(WF, headers=bearer(token)), 401) == "unauthorized"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    ("template", "code"),
    [
        ("{{ ('ab' * 300000000) | length }}", "template_limit"),
        ("{{ 1 / event.data.zero }}", "template_error"),
    ],
)
async def test_a_failing_enrollment_key_answers_422_with_its_code_and_replays_the_same(
    client: httpx.AsyncClient, engine: Engine, template: str, code: str
) -> None:
    published = await engine.publish_workflow(hook("keyed", enrollment={"key": template}))
    key = await make_key(client, "trigger")
    url = f"/api/public/trigger/{key}/{published.workflow.id}"
    first = await client.post(url, json={"zero": 0}, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == 422, first.text
    error = first.json()["error"]
    assert error["code"] == code
    assert template not in error["message"], "public callers do not see the workflow's template"
    again = await client.post(url, json={"zero": 0}, headers={"Idempotency-Key": "k-1"})
    assert again.status_code == 422 and again.json()["error"]["details"]["replayed"] is True
    api_key = await make_key(client, "api")
    private = await client.post(
        f"/api/private/trigger/{published.workflow.id}",
        json={"zero": 0},
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert private.status_code == 422 and private.json()["error"]["code"] == code
    assert "trigger.enrollment.key" in private.json()["error"]["message"], "private callers see why"
    assert await engine.db.pool.fetchval("SELECT count(*) FROM runs") == 0
