"""Credentials end to end on the real database: sealed at rest, resolved by the worker into what
``http_request`` sends to a real local server, OAuth2 tokens fetched from and refreshed at a real
local OAuth2 server (before expiry, after a 401, once however many steps ask), and never in a
step's record or a log line."""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.core.chat import Message, ModelRequest
from agentflow.core.credentials import sealed_with
from agentflow.core.errors import StepFailure
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.records import RunRecord
from agentflow.core.sealing import SealBroken, parse_sealing_key, unseal
from agentflow.engine import Engine
from agentflow.integrations.guarded_http import guarded_client
from agentflow.llm.scripted import ScriptedProvider
from agentflow.nodes.credential_access import CredentialAccess
from agentflow.oauth2_consents import challenge
from agentflow.runtime.worker import Worker
from agentflow.settings import sealing_key
from tests.conftest import make_settings
from tests.support.agents import calls, running_worker
from tests.support.http_server import serve
from tests.support.oauth2_server import OAuth2Server
from tests.support.scripted_http import ScriptedServer, json_reply
from tests.support.target_server import Reply

KEY = base64.b64encode(os.urandom(32)).decode()
SECRETS = {
    "api": "APIKEY-SECRET-1111",
    "bearer": "BEARER-SECRET-2222",
    "user": "basic-user-3333",
    "password": "BASICPASS-3333",
    "client": "CLIENT-SECRET-4444",
}


@pytest.fixture
def oauth() -> Iterator[OAuth2Server]:
    with OAuth2Server(client_secret=SECRETS["client"]) as server:
        yield server


@pytest.fixture
def other() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server


@pytest.fixture
async def engine(database_url: str, oauth: OAuth2Server, other: ScriptedServer) -> AsyncIterator[Engine]:
    allow = f"127.0.0.1:{oauth.port},127.0.0.1:{other.port}"
    eng = await Engine.connect(
        make_settings(database_url, secret_key=KEY, http_allow=allow), migrate_schema=False
    )
    yield eng
    await eng.close()


def client_credentials(oauth: OAuth2Server, **extra: Any) -> dict[str, Any]:
    return {"kind": "oauth2_client_credentials", "token_url": oauth.token_url, "client_id": oauth.client_id,
            "client_secret": SECRETS["client"], "scopes": ["crm.read"], **extra}  # fmt: skip


def call(node_id: str, url: str, credential: str, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "type": "http_request", "url": url, "credential": credential, **extra}


async def run_flow(engine: Engine, name: str, *nodes: dict[str, Any]) -> RunRecord:
    await engine.publish_workflow({"name": name, "kind": "structured", "nodes": list(nodes)})
    run = await engine.start_run(name, {})
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status.is_terminal, (done.status, done.error)
    return done


async def recorded(engine: Engine) -> str:
    """Everything runs and steps recorded, as text."""
    rows = await engine.db.pool.fetch(
        "SELECT s::text AS t FROM run_steps s UNION ALL SELECT r::text FROM runs r"
    )
    return "\n".join(row["t"] for row in rows)


async def test_stored_credentials_are_sealed_at_rest_and_listed_without_secrets(
    engine: Engine, oauth: OAuth2Server
) -> None:
    await engine.credentials.create("crm", client_credentials(oauth))
    await engine.credentials.create("search", {"kind": "api_key", "key": SECRETS["api"], "placement": "query",
                                               "parameter": "api_key"})  # fmt: skip
    await engine.credentials.create("basic", {"kind": "basic", "username": SECRETS["user"],
                                              "password": SECRETS["password"]})  # fmt: skip
    listed = await engine.credentials.list()
    assert [(c.name, c.kind, c.secret_fields) for c in listed] == [
        ("basic", "basic", ["password", "username"]),
        ("crm", "oauth2_client_credentials", ["client_secret"]),
        ("search", "api_key", ["key"]),
    ]
    assert listed[1].metadata == {"token_url": oauth.token_url, "client_id": "agentflow", "scopes": ["crm.read"],
                                  "client_auth": "basic"}  # fmt: skip
    rows = await engine.db.pool.fetch("SELECT c::text AS t, secret, workspace_id, name FROM credentials c")
    for row in rows:
        for secret in SECRETS.values():
            assert secret not in row["t"] and secret.encode() not in row["secret"]
        opened = json.loads(
            unseal(parse_sealing_key(KEY), row["secret"], sealed_with(row["workspace_id"], row["name"]))
        )
        assert set(opened) <= {"client_secret", "key", "username", "password"}
        with pytest.raises(SealBroken):  # bound to its row: copied to another name it does not open
            unseal(parse_sealing_key(KEY), row["secret"], sealed_with(row["workspace_id"], "elsewhere"))


async def test_each_kind_reaches_the_server_and_no_secret_is_recorded_or_logged(
    engine: Engine, worker: Worker, oauth: OAuth2Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await engine.credentials.create(
        "key-header", {"kind": "api_key", "key": SECRETS["api"], "prefix": "Token "}
    )
    await engine.credentials.create("key-query", {"kind": "api_key", "key": SECRETS["api"], "placement": "query",
                                                  "parameter": "api_key"})  # fmt: skip
    await engine.credentials.create("basic", {"kind": "basic", "username": SECRETS["user"],
                                              "password": SECRETS["password"]})  # fmt: skip
    await engine.credentials.create("bearer", {"kind": "bearer", "token": SECRETS["bearer"]})
    await engine.credentials.create("crm", client_credentials(oauth))
    echo = f"{oauth.url}/echo/x"
    done = await run_flow(
        engine, "every-kind",
        call("header", echo, "key-header"),
        call("query", echo + "?page=2", "key-query"),
        call("basic", echo, "basic", headers={"Authorization": "Bearer mine"}),  # the credential wins
        call("bearer", echo, "bearer"),
        call("oauth", f"{oauth.url}/api/contacts", "crm"),
        {"id": "done", "type": "finish", "output": "{{ steps }}"},
    )  # fmt: skip
    assert done.status == "completed", done.error
    steps = {s.node_id: s for s in await engine.list_steps(done.id)}
    received = {n: steps[n].output["body"] for n in ("header", "query", "basic", "bearer")}
    # What the server saw is the credential; what the step recorded of it (an echo) is scrubbed.
    assert received["header"]["headers"]["X-API-Key"] == "Token [redacted]"
    assert received["query"]["query"] == {"page": ["2"], "api_key": ["[redacted]"]}
    assert received["basic"]["headers"]["Authorization"] == "Basic [redacted]"
    assert received["bearer"]["headers"]["Authorization"] == "Bearer [redacted]"
    assert steps["oauth"].output["body"] == {"ok": True, "seen": "Bearer [redacted]"}
    [(_, sent)] = oauth.resource_calls
    assert sent is not None and sent.removeprefix("Bearer ") in oauth.valid_access()
    assert steps["query"].input == {"method": "GET", "url": echo + "?page=2", "credential": "key-query",
                                    "headers": {"Idempotency-Key": steps["query"].idempotency_key}}  # fmt: skip
    assert steps["basic"].input["headers"]["Authorization"] == "[redacted]"
    text = await recorded(engine) + caplog.text
    for secret in [*SECRETS.values(), base64.b64encode(f"{SECRETS['user']}:{SECRETS['password']}".encode()).decode(),
                   *oauth.valid_access()]:  # fmt: skip
        assert secret not in text, secret
    assert "HTTP Request: GET" in caplog.text, "httpx's log lines were captured (and hold no secret)"


async def test_the_server_really_gets_each_credential(
    engine: Engine, worker: Worker, other: ScriptedServer
) -> None:
    other.script("/x", json_reply({"ok": True}))
    await engine.credentials.create("k", {"kind": "api_key", "key": SECRETS["api"], "parameter": "X-Key"})
    await engine.credentials.create("q", {"kind": "api_key", "key": SECRETS["api"], "placement": "query",
                                          "parameter": "key"})  # fmt: skip
    await engine.credentials.create(
        "b", {"kind": "basic", "username": SECRETS["user"], "password": SECRETS["password"]}
    )
    await engine.credentials.create("t", {"kind": "bearer", "token": SECRETS["bearer"]})
    url = f"{other.url}/x"
    done = await run_flow(
        engine, "sent", call("k", url, "k"), call("q", url, "q"), call("b", url, "b"), call("t", url, "t")
    )
    assert done.status == "completed", done.error
    k, q, b, t = other.requests("/x")
    assert k.header("X-Key") == SECRETS["api"] and q.query["key"] == [SECRETS["api"]]
    assert (
        b.header("Authorization")
        == "Basic " + base64.b64encode(f"{SECRETS['user']}:{SECRETS['password']}".encode()).decode()
    )
    assert t.header("Authorization") == f"Bearer {SECRETS['bearer']}"


async def test_a_redirect_to_another_origin_does_not_carry_the_credential(
    engine: Engine, worker: Worker, oauth: OAuth2Server, other: ScriptedServer
) -> None:
    other.script("/same", Reply(302, headers={"Location": "/landing"}))
    other.script("/landing", Reply(302, headers={"Location": f"{oauth.url}/echo/away"}))
    await engine.credentials.create("k", {"kind": "api_key", "key": SECRETS["api"]})
    done = await run_flow(engine, "redirected", call("go", f"{other.url}/same", "k"))
    assert done.status == "completed", done.error
    [first] = other.requests("/same")
    [landing] = other.requests("/landing")
    assert first.header("X-API-Key") == landing.header("X-API-Key") == SECRETS["api"]  # same origin: kept
    away = (await engine.list_steps(done.id))[0].output["body"]["headers"]
    assert "X-API-Key" not in away and "x-api-key" not in away  # another origin: never sent


async def test_a_missing_credential_fails_the_step_with_a_stable_code_and_the_fix(
    engine: Engine, worker: Worker, oauth: OAuth2Server
) -> None:
    node = call("get", f"{oauth.url}/echo/x", "nope", retry={"max_attempts": 3, "initial_delay": "10ms"})
    done = await run_flow(engine, "missing", node)
    assert done.status == "failed" and done.error is not None
    assert done.error["code"] == "credential_not_found"
    assert "nope" in done.error["message"] and "POST /api/credentials" in done.error["solution"]
    assert len(await engine.list_steps(done.id)) == 1, "not retried: it will not appear by itself"


async def test_client_credentials_are_fetched_once_reused_and_refreshed_before_expiry(
    engine: Engine, worker: Worker, oauth: OAuth2Server
) -> None:
    await engine.credentials.create("crm", client_credentials(oauth))
    api = f"{oauth.url}/api/contacts"
    for name in ("first", "second"):
        assert (await run_flow(engine, name, call("get", api, "crm"))).status == "completed"
    assert oauth.grants == {"client_credentials": 1}
    assert oauth.forms[0] == {"grant_type": "client_credentials", "scope": "crm.read", "auth": "basic"}
    stored = await engine.credentials.get("crm")
    assert stored.secret_fields == ["access_token", "client_secret"] and stored.version == 2
    assert stored.token_expires_at is not None
    # Within the refresh margin of its expiry (database clock): the next step refreshes first.
    soon = "UPDATE credentials SET token_expires_at = now() + interval '10 seconds', updated_at = now() - interval '1 hour'"
    await engine.db.pool.execute(soon)
    assert (await run_flow(engine, "third", call("get", api, "crm"))).status == "completed"
    assert oauth.grants == {"client_credentials": 2}
    assert len(oauth.resource_calls) == 3, "no request was refused"
    # Refreshing ahead of expiry fails (the provider no longer knows the client secret): the
    # token, not expired yet, serves the step; once expired, the step fails with the reason.
    oauth.client_secret = "rotated-at-the-provider"
    await engine.db.pool.execute(soon)
    assert (await run_flow(engine, "fourth", call("get", api, "crm"))).status == "completed"
    assert oauth.refused == {"invalid_client": 1} and oauth.grants == {"client_credentials": 2}
    await engine.db.pool.execute("UPDATE credentials SET token_expires_at = now() - interval '1 second'")
    expired = await run_flow(engine, "fifth", call("get", api, "crm"))
    assert expired.error is not None and expired.error["code"] == "oauth2_grant_refused"


async def test_a_401_refreshes_the_token_once_and_retries_once(
    engine: Engine, worker: Worker, oauth: OAuth2Server
) -> None:
    await engine.credentials.create("crm", client_credentials(oauth))
    api = f"{oauth.url}/api/contacts"
    assert (await run_flow(engine, "warm", call("get", api, "crm"))).status == "completed"
    oauth.expire_tokens()  # the resource no longer knows the stored token
    done = await run_flow(engine, "after-expiry", call("get", api, "crm"))
    assert done.status == "completed", done.error
    assert oauth.grants == {"client_credentials": 2}
    first, second, third = (auth for _, auth in oauth.resource_calls)
    assert first == second != third, "the refused token was replaced, then accepted"
    # A server that refuses every token: one refresh, one more try, then a clear failure.
    denied = await run_flow(engine, "denied", call("get", f"{oauth.url}/api/deny", "crm"))
    assert denied.status == "failed" and denied.error is not None
    assert denied.error["code"] == "http_status" and denied.error["details"]["status"] == 401
    assert "credential 'crm'" in denied.error["solution"]
    assert oauth.grants == {"client_credentials": 3}
    assert len(oauth.resource_calls) == 5


async def test_concurrent_steps_after_a_401_make_one_token_request(
    engine: Engine, oauth: OAuth2Server
) -> None:
    await engine.credentials.create("crm", client_credentials(oauth))
    oauth.delay = 0.3  # the token request is slow: the other worker must wait for it, not ask again
    async with guarded_client(allow=[f"127.0.0.1:{oauth.port}"]) as http:
        # Two workers' views of the credential store, on the same database.
        first, second = (
            CredentialAccess(engine.db.pool, lambda: parse_sealing_key(KEY), http) for _ in range(2)
        )
        seen = await first.resolve(DEFAULT_WORKSPACE, "crm", "n")
        assert oauth.grants == {"client_credentials": 1}
        oauth.expire_tokens()
        a, b = await asyncio.gather(
            first.refreshed(DEFAULT_WORKSPACE, "crm", "n", seen),
            second.refreshed(DEFAULT_WORKSPACE, "crm", "n", seen),
        )
    assert oauth.grants == {"client_credentials": 2}, "one refresh for both"
    assert a.applied == b.applied and a.version == b.version == seen.version + 1
    assert a.applied.headers["Authorization"].removeprefix("Bearer ") in oauth.valid_access()


async def test_concurrent_runs_whose_token_was_revoked_refresh_it_once(
    engine: Engine, worker: Worker, oauth: OAuth2Server
) -> None:
    await engine.credentials.create("crm", client_credentials(oauth))
    api = f"{oauth.url}/api/contacts"
    assert (await run_flow(engine, "warm", call("get", api, "crm"))).status == "completed"
    oauth.expire_tokens()
    oauth.delay = 0.3
    await engine.publish_workflow({"name": "many", "kind": "structured", "nodes": [call("get", api, "crm")]})
    started = [await engine.start_run("many", {}) for _ in range(4)]
    done = [await engine.wait_for_run(run.id, timeout=30) for run in started]
    assert [run.status for run in done] == ["completed"] * 4, [run.error for run in done]
    assert oauth.grants == {"client_credentials": 2}, "one token request for every step that got a 401"


async def test_authorization_code_tokens_refresh_with_rotation_and_a_code_exchange(
    engine: Engine, worker: Worker, oauth: OAuth2Server
) -> None:
    spec = {"kind": "oauth2_authorization_code", "token_url": oauth.token_url, "client_id": oauth.client_id,
            "client_secret": SECRETS["client"], "client_auth": "body"}  # fmt: skip
    await engine.credentials.create("person", {**spec, "refresh_token": oauth.issue_refresh_token()})
    api = f"{oauth.url}/api/me"
    assert (await run_flow(engine, "first", call("get", api, "person"))).status == "completed"
    assert oauth.grants == {"refresh_token": 1} and oauth.forms[-1]["auth"] == "body"
    oauth.expire_tokens()  # the next refresh must use the rotated refresh token, the old one is gone
    assert (await run_flow(engine, "second", call("get", api, "person"))).status == "completed"
    assert oauth.grants == {"refresh_token": 2} and not oauth.refused
    # A credential waiting for its code: steps fail until it is exchanged.
    await engine.credentials.create("pending", spec)
    waiting = await run_flow(engine, "pending", call("get", api, "pending"))
    assert waiting.error is not None and waiting.error["code"] == "credential_not_authorized"
    record = await engine.credentials.authorize("pending", oauth.issue_code(), redirect_uri="https://app/cb")
    assert record.secret_fields == ["access_token", "client_secret", "refresh_token"]
    assert oauth.forms[-1]["grant_type"] == "authorization_code"
    assert oauth.forms[-1]["redirect_uri"] == "https://app/cb"
    assert (await run_flow(engine, "authorized", call("get", api, "pending"))).status == "completed"
    assert oauth.grants["authorization_code"] == 1 and oauth.grants["refresh_token"] == 2


async def test_a_worker_with_another_key_or_a_refused_client_fails_clearly(
    engine: Engine, worker: Worker, oauth: OAuth2Server
) -> None:
    await engine.credentials.create("crm", client_credentials(oauth, client_secret="wrong-secret"))
    refused = await run_flow(engine, "refused", call("get", f"{oauth.url}/api/x", "crm"))
    assert refused.error is not None and refused.error["code"] == "oauth2_grant_refused"
    assert (
        refused.error["details"]["error"] == "invalid_client" and "client_secret" in refused.error["solution"]
    )
    assert "wrong-secret" not in await recorded(engine)
    async with guarded_client() as http:
        foreign = CredentialAccess(engine.db.pool, lambda: os.urandom(32), http)
        with pytest.raises(StepFailure) as info:
            await foreign.resolve(DEFAULT_WORKSPACE, "crm", "n")
    assert info.value.info.code == "credential_unreadable" and not info.value.retryable


async def test_a_refresh_claimed_by_a_stuck_worker_or_superseded_by_a_replacement(
    engine: Engine, oauth: OAuth2Server
) -> None:
    key = parse_sealing_key(KEY)
    await engine.credentials.create("crm", client_credentials(oauth))
    stuck = (
        "UPDATE credentials SET refresh_owner = gen_random_uuid(), refresh_until = now() + interval '1 hour'"
    )
    await engine.db.pool.execute(stuck)
    async with guarded_client(allow=[f"127.0.0.1:{oauth.port}"]) as http:
        impatient = CredentialAccess(engine.db.pool, lambda: key, http, wait=0.3)
        with pytest.raises(StepFailure) as busy:
            await impatient.resolve(DEFAULT_WORKSPACE, "crm", "n")
        assert busy.value.info.code == "credential_refresh_busy" and busy.value.retryable
        assert not oauth.grants, "no token request while another worker holds the claim"
        # The claim lapses: the next step claims it and fetches the token.
        await engine.db.pool.execute("UPDATE credentials SET refresh_until = now() - interval '1 second'")
        assert (await impatient.resolve(DEFAULT_WORKSPACE, "crm", "n")).version == 2
        # A person replaces the credential while a refresh is in flight: the new secret wins.
        await engine.db.pool.execute("UPDATE credentials SET token_expires_at = now()")
        oauth.delay = 0.5
        access = CredentialAccess(engine.db.pool, lambda: key, http)
        refreshing = asyncio.create_task(access.resolve(DEFAULT_WORKSPACE, "crm", "n"))
        await asyncio.sleep(0.2)
        await engine.credentials.put("crm", {"kind": "bearer", "token": "replaced-token-1"})
        resolved = await refreshing
    assert resolved.applied.headers == {"Authorization": "Bearer replaced-token-1"} and resolved.version == 3
    assert oauth.grants == {"client_credentials": 2}, "its token came, and was not kept"


async def test_a_worker_without_a_key_fails_steps_that_use_credentials(
    engine: Engine, database_url: str
) -> None:
    await engine.credentials.create("crm", {"kind": "bearer", "token": "t-12345"})
    keyless = make_settings(database_url)  # an external database and no AGENTFLOW_SECRET_KEY
    async with guarded_client() as http:
        access = CredentialAccess(engine.db.pool, functools.partial(sealing_key, keyless, False), http)
        with pytest.raises(StepFailure) as info:
            await access.resolve(DEFAULT_WORKSPACE, "crm", "n")
    assert info.value.info.code == "secret_key_missing" and not info.value.retryable
    assert "AGENTFLOW_SECRET_KEY" in (info.value.info.solution or "")


async def test_an_agents_http_tool_carries_its_credential_and_the_model_never_sees_it(
    engine: Engine, oauth: OAuth2Server, other: ScriptedServer
) -> None:
    other.script("/echo", json_reply({"echo": SECRETS["api"]}))  # a server that echoes the key back
    await engine.credentials.create("crm", client_credentials(oauth))
    await engine.credentials.create("k", {"kind": "api_key", "key": SECRETS["api"], "parameter": "X-Key"})
    await engine.publish_workflow({
        "name": "agent-with-credentials",
        "kind": "agent",
        "prompt": "Look the contact up.",
        "http_tools": [
            {"name": "contacts", "method": "GET", "url": f"{oauth.url}/api/contacts", "credential": "crm"},
            {"name": "echo", "method": "POST", "url": f"{other.url}/echo", "credential": "k"},
        ],
    })  # fmt: skip
    seen: list[str] = []

    def respond(request: ModelRequest) -> Message:
        seen.append(json.dumps([m.content for m in request.messages]))
        if len(seen) == 1:
            return calls(("contacts", {}), ("echo", {"q": 1}))
        return calls(("complete", {"summary": "looked up"}))

    async with running_worker(engine, model=ScriptedProvider(respond)):
        run = await engine.start_run("agent-with-credentials", {})
        done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "completed", done.error
    [(_, sent)] = oauth.resource_calls
    assert sent is not None and sent.removeprefix("Bearer ") in oauth.valid_access()
    [echoed] = other.requests("/echo")
    assert echoed.header("X-Key") == SECRETS["api"], "the server got the key"
    tools = {s.name: s.output["result"] for s in await engine.list_steps(run.id) if s.kind == "agent.tool"}
    assert tools["contacts"]["body"] == {"ok": True, "seen": "Bearer [redacted]"}
    assert tools["echo"]["body"] == {"echo": "[redacted]"}
    text = await recorded(engine) + "".join(seen)
    for secret in [SECRETS["api"], SECRETS["client"], *oauth.valid_access()]:
        assert secret not in text, "a secret reached the model or a record"


async def test_a_consent_url_and_its_callback_connect_an_authorization_code_credential(
    engine: Engine, worker: Worker, oauth: OAuth2Server
) -> None:
    spec = {"kind": "oauth2_authorization_code", "token_url": oauth.token_url, "client_id": oauth.client_id,
            "client_secret": SECRETS["client"], "scopes": ["crm.read", "crm.write"],
            "authorize_url": f"{oauth.url}/authorize"}  # fmt: skip
    await engine.credentials.create("crm-user", spec)
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as api:
        started = await api.post("/api/credentials/crm-user/oauth2/authorize", json={})
        assert started.status_code == 200, started.text
        url = urlsplit(started.json()["authorize_url"])
        asked = dict(parse_qsl(url.query))
        # The person consents at the provider, which redirects back with a code and the state.
        code = oauth.issue_code()
        forged = await api.get("/api/public/oauth2/callback", params={"code": code, "state": "forged"})
        back = await api.get("/api/public/oauth2/callback", params={"code": code, "state": asked["state"]})
        again = await api.get("/api/public/oauth2/callback", params={"code": code, "state": asked["state"]})
        refused = await api.get("/api/public/oauth2/callback", params={"error": "access_denied"})
        plain = await api.post("/api/credentials/key/oauth2/authorize", json={})
        await engine.credentials.create("static", {"kind": "bearer", "token": SECRETS["bearer"]})
        no_page = {k: v for k, v in spec.items() if k != "authorize_url"}
        await engine.credentials.create("no-page", no_page)
        wrong_kind = await api.post("/api/credentials/static/oauth2/authorize", json={})
        missing_page = await api.post("/api/credentials/no-page/oauth2/authorize", json={})
    assert f"{url.scheme}://{url.netloc}{url.path}" == f"{oauth.url}/authorize"
    assert (asked["response_type"], asked["client_id"], asked["scope"]) == (
        "code",
        oauth.client_id,
        "crm.read crm.write",
    )
    assert asked["redirect_uri"] == "http://127.0.0.1:8000/api/public/oauth2/callback"
    assert asked["code_challenge_method"] == "S256"
    assert forged.status_code == 401 and "consent_invalid" in forged.text
    assert back.status_code == 200 and "crm-user is connected" in back.text, back.text
    assert again.status_code == 401, "a state is used once"
    assert refused.status_code == 400 and "access_denied" in refused.text
    assert plain.status_code == 404
    assert wrong_kind.status_code == 409 and wrong_kind.json()["error"]["code"] == "credential_kind_mismatch"
    assert missing_page.status_code == 422 and missing_page.json()["error"]["code"] == "authorize_url_missing"
    # PKCE: the token request carried the verifier whose S256 is the challenge the provider saw.
    exchange = next(f for f in oauth.forms if f.get("grant_type") == "authorization_code")
    assert challenge(exchange["code_verifier"]) == asked["code_challenge"]
    assert exchange["redirect_uri"] == asked["redirect_uri"]
    stored = await engine.credentials.get("crm-user")
    assert {"access_token", "refresh_token"} <= set(stored.secret_fields)
    done = await run_flow(engine, "uses-consent", call("contacts", f"{oauth.url}/api/contacts", "crm-user"))
    assert done.status == "completed", done.error
