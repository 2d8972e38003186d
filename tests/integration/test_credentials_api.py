"""/api/credentials through a real server (secrets go in, never come out), the OAuth2 code
exchange against a real local OAuth2 server, and `agentflow credentials` as a process."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.api.deps import WORKSPACE_HEADER
from agentflow.engine import Engine
from tests.conftest import make_settings
from tests.support.cli import cli_env, run_cli
from tests.support.http_server import error_code, serve
from tests.support.oauth2_server import OAuth2Server

CREDENTIALS = "/api/credentials"
KEY = base64.b64encode(os.urandom(32)).decode()
SECRET = "TOPSECRET-9876"


@pytest.fixture
def oauth() -> Iterator[OAuth2Server]:
    with OAuth2Server(client_secret=SECRET) as server:
        yield server


@pytest.fixture
async def engine(database_url: str, oauth: OAuth2Server) -> AsyncIterator[Engine]:
    settings = make_settings(database_url, secret_key=KEY, http_allow=f"127.0.0.1:{oauth.port}")
    eng = await Engine.connect(settings, migrate_schema=False)
    yield eng
    await eng.close()


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        yield http


def oauth_code(oauth: OAuth2Server, **extra: Any) -> dict[str, Any]:
    return {"kind": "oauth2_authorization_code", "token_url": oauth.token_url, "client_id": oauth.client_id,
            "client_secret": SECRET, **extra}  # fmt: skip


async def test_create_list_get_replace_delete_and_never_a_secret(client: httpx.AsyncClient) -> None:
    made = await client.post(CREDENTIALS, json={"name": "crm", "kind": "bearer", "token": SECRET})
    assert made.status_code == 201, made.text
    body = made.json()
    assert (body["name"], body["kind"], body["metadata"], body["secret_fields"], body["version"]) == (
        "crm", "bearer", {}, ["token"], 1
    )  # fmt: skip
    await client.post(CREDENTIALS, json={"name": "search", "kind": "api_key", "key": SECRET,
                                         "placement": "query", "parameter": "k"})  # fmt: skip
    listed = await client.get(CREDENTIALS)
    assert [(c["name"], c["metadata"]) for c in listed.json()["credentials"]] == [
        ("crm", {}), ("search", {"placement": "query", "parameter": "k", "prefix": ""})
    ]  # fmt: skip
    got = await client.get(f"{CREDENTIALS}/crm")
    assert got.status_code == 200 and got.json() == body
    replaced = await client.put(
        f"{CREDENTIALS}/crm", json={"kind": "basic", "username": "u", "password": SECRET}
    )
    assert (
        replaced.status_code == 200 and replaced.json()["kind"] == "basic" and replaced.json()["version"] == 2
    )
    created = await client.put(f"{CREDENTIALS}/new", json={"kind": "bearer", "token": SECRET})
    assert created.status_code == 201
    deleted = await client.delete(f"{CREDENTIALS}/crm")
    assert deleted.status_code == 200 and deleted.json()["name"] == "crm"
    assert error_code(await client.get(f"{CREDENTIALS}/crm"), 404) == "credential_not_found"
    for response in (made, listed, got, replaced, created, deleted, await client.get("/openapi.json")):
        assert SECRET not in response.text


async def test_bad_requests_get_stable_codes(client: httpx.AsyncClient) -> None:
    await client.post(CREDENTIALS, json={"name": "crm", "kind": "bearer", "token": "t-1"})
    again = await client.post(CREDENTIALS, json={"name": "crm", "kind": "bearer", "token": "t-2"})
    assert error_code(again, 409) == "credential_exists"
    for bad in (
        {"name": "crm2", "kind": "password", "token": "t"},
        {"name": "crm2", "kind": "bearer", "token": "line\nbreak"},
        {"name": "crm2", "kind": "bearer", "token": "t", "extra": True},
        {"name": "has space", "kind": "bearer", "token": "t"},
        {"name": "crm2", "kind": "api_key", "key": "k", "parameter": "Content-Length"},
        {"kind": "bearer", "token": "t"},
    ):
        response = await client.post(CREDENTIALS, json=bad)
        assert error_code(response, 422) == "invalid_request", bad
        assert "line\nbreak" not in response.text
    for name in ("nope", "has%20space", "-x", "x" * 101):
        assert error_code(await client.get(f"{CREDENTIALS}/{name}"), 404) == "credential_not_found"
        assert error_code(await client.delete(f"{CREDENTIALS}/{name}"), 404) == "credential_not_found"
    put_bad = await client.put(f"{CREDENTIALS}/a%20b", json={"kind": "bearer", "token": "t"})
    assert error_code(put_bad, 404) == "credential_not_found"


async def test_without_a_secret_key_nothing_is_stored(database_url: str) -> None:
    engine = await Engine.connect(make_settings(database_url), migrate_schema=False)
    try:
        async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as http:
            refused = await http.post(CREDENTIALS, json={"name": "crm", "kind": "bearer", "token": "t"})
            assert error_code(refused, 409) == "secret_key_missing"
            assert (await http.get(CREDENTIALS)).json() == {"credentials": []}
    finally:
        await engine.close()


async def test_another_workspaces_credential_is_404(client: httpx.AsyncClient, engine: Engine) -> None:
    other = uuid.uuid4()
    await engine.db.pool.execute("INSERT INTO workspaces (id, name) VALUES ($1, 'b')", other)
    await engine.credentials.create("theirs", {"kind": "bearer", "token": "t-theirs"}, workspace_id=other)
    await engine.credentials.create("mine", {"kind": "bearer", "token": "t-mine"})
    foreign = {WORKSPACE_HEADER: str(other)}
    assert error_code(await client.get(f"{CREDENTIALS}/theirs"), 404) == "credential_not_found"
    assert error_code(await client.get(f"{CREDENTIALS}/mine", headers=foreign), 404) == "credential_not_found"
    assert (
        error_code(await client.delete(f"{CREDENTIALS}/mine", headers=foreign), 404) == "credential_not_found"
    )
    assert [c["name"] for c in (await client.get(CREDENTIALS, headers=foreign)).json()["credentials"]] == [
        "theirs"
    ]
    assert (await engine.credentials.get("mine")).version == 1


async def test_the_oauth2_callback_exchanges_a_code_for_tokens(
    client: httpx.AsyncClient, oauth: OAuth2Server
) -> None:
    await client.post(CREDENTIALS, json={"name": "person", **oauth_code(oauth)})
    pending = (await client.get(f"{CREDENTIALS}/person")).json()
    assert pending["secret_fields"] == ["client_secret"] and pending["token_expires_at"] is None
    verifier = "v" * 43
    exchanged = await client.post(f"{CREDENTIALS}/person/oauth2/callback",
                                  json={"code": oauth.issue_code(), "code_verifier": verifier})  # fmt: skip
    assert exchanged.status_code == 200, exchanged.text
    assert exchanged.json()["secret_fields"] == ["access_token", "client_secret", "refresh_token"]
    assert exchanged.json()["token_expires_at"] is not None and exchanged.json()["version"] == 2
    assert oauth.forms[-1]["code_verifier"] == verifier and oauth.forms[-1]["auth"] == "basic"
    for token in oauth.valid_access():
        assert token not in exchanged.text
    used = await client.post(f"{CREDENTIALS}/person/oauth2/callback", json={"code": "code-already-used"})
    refused = error_code(used, 422)
    assert refused == "oauth2_grant_refused" and used.json()["error"]["details"]["error"] == "invalid_grant"
    await client.post(CREDENTIALS, json={"name": "static", "kind": "bearer", "token": "t-1"})
    wrong = await client.post(f"{CREDENTIALS}/static/oauth2/callback", json={"code": "c"})
    assert error_code(wrong, 409) == "credential_kind_mismatch"
    missing = await client.post(f"{CREDENTIALS}/nope/oauth2/callback", json={"code": "c"})
    assert error_code(missing, 404) == "credential_not_found"
    # A token endpoint the allow-list does not open is refused before any connection.
    closed = {"name": "closed", **oauth_code(oauth, token_url="http://127.0.0.1:9/token")}
    await client.post(CREDENTIALS, json=closed)
    blocked = await client.post(f"{CREDENTIALS}/closed/oauth2/callback", json={"code": "c"})
    assert error_code(blocked, 502) == "oauth2_token_failed"
    assert blocked.json()["error"]["details"]["cause"] == "destination_blocked"


async def test_cli_sets_lists_shows_and_deletes(engine: Engine, database_url: str, tmp_path: Path) -> None:
    env = cli_env(database_url, AGENTFLOW_SECRET_KEY=KEY)
    spec = tmp_path / "crm.yaml"
    spec.write_text(f"kind: api_key\nkey: {SECRET}\nparameter: X-Token\n")
    made = run_cli(["credentials", "set", "crm", "--file", str(spec)], env)
    assert made.returncode == 0 and "created credential crm (api_key)" in made.stdout, (
        made.stdout + made.stderr
    )
    assert (await engine.credentials.get("crm")).metadata["parameter"] == "X-Token"
    listed = run_cli(["credentials", "list"], env)
    shown = run_cli(["credentials", "show", "crm"], env)
    assert listed.returncode == 0 and "crm" in listed.stdout and "api_key" in listed.stdout
    assert shown.returncode == 0 and "X-Token" in shown.stdout and "key (never shown)" in shown.stdout
    spec.write_text("kind: bearer\n")
    bad = run_cli(["credentials", "set", "other", "-f", str(spec)], env)
    assert bad.returncode == 1 and "credential_invalid" in bad.stderr and "Traceback" not in bad.stderr
    deleted = run_cli(["credentials", "delete", "crm"], env)
    assert deleted.returncode == 0 and "deleted credential crm" in deleted.stdout
    assert [c.name for c in await engine.credentials.list()] == []
    for result in (made, listed, shown, bad, deleted):
        assert SECRET not in result.stdout + result.stderr
