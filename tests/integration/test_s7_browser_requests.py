"""S7: browser-shaped requests in loopback mode (no API key) change nothing.

A page on any site can make the browser POST to ``http://127.0.0.1:8000`` without a CORS
preflight (a body without a Content-Type, ``text/plain``, a form), or, after DNS rebinding,
under its own host name. Each such request, on each dangerous route, is refused, and the
database is checked afterwards: 0 writes accepted. Requests relayed by a reverse proxy get
no keyless access. Same-origin pages and programs (no ``Origin``) still work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentflow.api.app import create_app, resolve_auth
from agentflow.api.browser_guard import HttpPolicy, http_policy
from agentflow.api.hosts import LOOPBACK_NAMES, parse_networks
from agentflow.core.errors import ConfigError
from agentflow.engine import Engine
from tests.support.http_server import error_code
from tests.support.processes import worker_env
from tests.support.serve_process import ServeProcess

SERVED = "http://127.0.0.1:8000"
EVIL = "http://evil.example"
CHROME = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36"
FLOW = {"name": "f", "kind": "structured", "nodes": [{"id": "done", "type": "finish"}]}
OTHER_FLOW = {"name": "pwned", "kind": "structured", "nodes": [{"id": "done", "type": "finish"}]}

# The routes a page would attack: (method, path, JSON body).
DANGEROUS: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/api/keys", {"kind": "api", "name": "pwned"}),
    ("POST", "/api/ai/workflows", OTHER_FLOW),
    ("POST", "/api/ai/workflows/f/runs", {"payload": {"x": 1}}),
    ("POST", "/api/events", {"topic": "pwn.ed", "message_id": "1", "data": {}}),
]


@dataclass(frozen=True)
class Attack:
    """What a browser sends for one kind of hostile page."""

    name: str
    headers: dict[str, str]
    content_type: str | None
    status: int
    code: str


ATTACKS = [
    # Each defence alone (the other headers absent), then whole browser requests.
    Attack("no Content-Type (Blob body)", {}, None, 415, "unsupported_media_type"),
    Attack("text/plain", {}, "text/plain;charset=UTF-8", 415, "unsupported_media_type"),
    Attack("HTML form", {}, "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
    Attack("multipart form", {}, "multipart/form-data; boundary=x", 415, "unsupported_media_type"),
    Attack("foreign Origin", {"Origin": EVIL}, "application/json", 403, "cross_origin_request"),
    Attack("Origin null (sandboxed frame)", {"Origin": "null"}, "application/json", 403, "cross_origin_request"),
    Attack("other port, same host", {"Origin": "http://127.0.0.1:3000"}, "application/json", 403,
           "cross_origin_request"),
    Attack("Sec-Fetch-Site cross-site", {"Sec-Fetch-Site": "cross-site"}, "application/json", 403,
           "cross_origin_request"),
    Attack("Sec-Fetch-Site same-site", {"Sec-Fetch-Site": "same-site"}, "application/json", 403,
           "cross_origin_request"),
    Attack("DNS rebinding", {"Host": "evil.example:8000", "Origin": "http://evil.example:8000",
                             "Sec-Fetch-Site": "same-origin"}, "application/json", 421, "host_not_allowed"),
    Attack("DNS rebinding to a loopback-looking name", {"Host": "127.0.0.1.evil.example:8000"},
           "application/json", 421, "host_not_allowed"),
    Attack("no-cors fetch from a page", {"Origin": EVIL, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors",
                                         "User-Agent": CHROME}, "text/plain;charset=UTF-8", 403,
           "cross_origin_request"),
    Attack("form post from a page", {"Origin": EVIL, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate",
                                     "User-Agent": CHROME}, "application/x-www-form-urlencoded", 403,
           "cross_origin_request"),
]  # fmt: skip


async def writes(engine: Engine) -> dict[str, int]:
    """Rows the dangerous routes would have written."""
    row = await engine.db.pool.fetchrow(
        "SELECT (SELECT count(*) FROM access_keys) AS keys, (SELECT count(*) FROM workflows) AS workflows,"
        " (SELECT count(*) FROM workflow_versions) AS versions, (SELECT count(*) FROM runs) AS runs,"
        " (SELECT count(*) FROM events) AS events"
    )
    return dict(row)


NOTHING_WRITTEN = {"keys": 0, "workflows": 1, "versions": 1, "runs": 0, "events": 0}


def client_for(app: Any, *, peer: str = "127.0.0.1", **kwargs: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(peer, 51234))
    return httpx.AsyncClient(transport=transport, base_url=SERVED, **kwargs)


@pytest.fixture
async def loopback(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    """The app as ``agentflow serve`` makes it on 127.0.0.1 with default settings."""
    await engine.publish_workflow(FLOW)
    auth = resolve_auth("auto", "127.0.0.1")
    policy = http_policy(
        allowed_hosts=[], cors_origins=[], trusted_proxies=[], listen_host="127.0.0.1", auth=auth
    )
    async with client_for(create_app(engine, auth=auth, policy=policy)) as client:
        yield client


def _encode(body: dict[str, Any], content_type: str | None) -> bytes:
    if content_type == "application/x-www-form-urlencoded":
        return b"kind=api&name=pwned"
    import json

    return json.dumps(body).encode()


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
async def test_browser_shaped_writes_are_refused_and_write_nothing(
    loopback: httpx.AsyncClient, engine: Engine, attack: Attack
) -> None:
    for method, path, body in DANGEROUS:
        headers = dict(attack.headers)
        if attack.content_type is not None:
            headers["Content-Type"] = attack.content_type
        response = await loopback.request(
            method, path, content=_encode(body, attack.content_type), headers=headers
        )
        if attack.content_type is None:
            assert "content-type" not in response.request.headers
        assert error_code(response, attack.status) == attack.code, (path, response.text)
        assert response.json()["error"].get("solution")
    assert await writes(engine) == NOTHING_WRITTEN


async def test_a_rebinding_page_cannot_read_either(loopback: httpx.AsyncClient) -> None:
    await loopback.post("/api/keys", json={"kind": "api", "name": "mine"})
    for path in ("/api/keys", "/api/ai/workflows", "/api/tasks", "/openapi.json"):
        response = await loopback.get(path, headers={"Host": "evil.example:8000"})
        assert error_code(response, 421) == "host_not_allowed", path
        assert "afk_" not in response.text and "mine" not in response.text


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:8000", "localhost:8000", "LOCALHOST", "[::1]:8000", "127.0.0.2", "[::ffff:127.0.0.1]:80"],
)
async def test_loopback_names_with_any_port_are_served(loopback: httpx.AsyncClient, host: str) -> None:
    response = await loopback.get("/api/ai/workflows", headers={"Host": host})
    assert response.status_code == 200, response.text


async def test_same_origin_pages_and_programs_still_write(
    loopback: httpx.AsyncClient, engine: Engine
) -> None:
    pages = [
        {"Origin": SERVED, "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "User-Agent": CHROME},
        {"Host": "localhost:8000", "Origin": "http://localhost:8000", "Sec-Fetch-Site": "same-origin"},
        {},  # a program: no Origin, no Sec-Fetch-*
        {"Sec-Fetch-Site": "none"},  # typed by the user
    ]
    for index, headers in enumerate(pages):
        key = await loopback.post("/api/keys", json={"kind": "api", "name": f"k{index}"}, headers=headers)
        assert key.status_code == 201, key.text
        run = await loopback.post("/api/ai/workflows/f/runs", json={"payload": {}}, headers=headers)
        assert run.status_code == 201, run.text
        event = {"topic": "a.b", "message_id": str(index), "data": {}}
        assert (await loopback.post("/api/events", json=event, headers=headers)).status_code == 201
    published = await loopback.post("/api/ai/workflows", json=OTHER_FLOW, headers=pages[0])
    assert published.status_code == 201
    assert await writes(engine) == {"keys": 4, "workflows": 2, "versions": 2, "runs": 4, "events": 4}
    # A body-less POST (cancel, complete) needs no Content-Type.
    run_id = run.json()["id"]
    cancel = await loopback.post(f"/api/ai/workflows/f/runs/{run_id}/cancel")
    assert cancel.status_code == 200, cancel.text


async def test_cross_origin_reads_are_left_to_the_browser(loopback: httpx.AsyncClient) -> None:
    # A GET changes nothing; without CORS headers the page cannot read the answer.
    response = await loopback.get(
        "/api/ai/workflows", headers={"Origin": EVIL, "Sec-Fetch-Site": "cross-site"}
    )
    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers


async def test_listed_cors_origins_get_cors_and_may_write(engine: Engine) -> None:
    await engine.publish_workflow(FLOW)
    console = "https://console.example.com"
    policy = http_policy(
        allowed_hosts=["api.example.com"], cors_origins=[console + "/"], trusted_proxies=[],
        listen_host="127.0.0.1", auth="optional",
    )  # fmt: skip
    app = create_app(engine, policy=policy)
    async with client_for(app) as client:
        base = {"Host": "api.example.com", "Origin": console}
        preflight = await client.options(
            "/api/keys",
            headers={
                **base,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type",
            },
        )
        assert preflight.status_code == 200, preflight.text
        assert preflight.headers["access-control-allow-origin"] == console
        created = await client.post(
            "/api/keys", json={"kind": "api", "name": "k"}, headers={**base, "Sec-Fetch-Site": "cross-site"}
        )
        assert created.status_code == 201 and created.headers["access-control-allow-origin"] == console
        other = await client.post(
            "/api/keys", json={"kind": "api", "name": "k"}, headers={**base, "Origin": EVIL}
        )
        assert error_code(other, 403) == "cross_origin_request"
        refused = await client.options(
            "/api/keys", headers={**base, "Origin": EVIL, "Access-Control-Request-Method": "POST"}
        )
        assert "access-control-allow-origin" not in refused.headers
        loop = await client.get("/api/keys", headers={"Host": "localhost:8000"})
        assert error_code(loop, 421) == "host_not_allowed", "the list replaces the loopback default"
    assert await engine.db.pool.fetchval("SELECT count(*) FROM access_keys") == 1


# A reverse proxy on the same machine connects from 127.0.0.1: without care, every request
# it relays looks local and gets keyless access.
PROXIED = [
    {"X-Forwarded-For": "203.0.113.9"},
    {"X-Forwarded-For": "127.0.0.1, 203.0.113.9"},  # the client's own claim, then the proxy's
    {"Forwarded": "for=203.0.113.9;proto=https"},
    {"X-Real-IP": "203.0.113.9"},
]


@pytest.mark.parametrize("headers", PROXIED, ids=["xff", "xff-spoofed", "forwarded", "x-real-ip"])
@pytest.mark.parametrize("trusted", [[], ["127.0.0.1"]], ids=["untrusted-proxy", "trusted-proxy"])
async def test_keyless_calls_relayed_by_a_proxy_are_401(
    engine: Engine, headers: dict[str, str], trusted: list[str]
) -> None:
    await engine.publish_workflow(FLOW)
    policy = http_policy(
        allowed_hosts=[], cors_origins=[], trusted_proxies=trusted, listen_host="127.0.0.1", auth="optional"
    )
    async with client_for(create_app(engine, policy=policy)) as proxy:
        for method, path, body in [*DANGEROUS, ("GET", "/api/keys", None)]:
            response = await proxy.request(method, path, json=body, headers=headers)
            assert error_code(response, 401) == "unauthorized", (path, response.text)
            assert "proxy" in response.json()["error"]["message"]
        # With a key, the proxy is no problem.
        _, token = await engine.keys.create("api", "proxy")
        keyed = await proxy.post(
            "/api/ai/workflows/f/runs", json={}, headers={**headers, "Authorization": f"Bearer {token}"}
        )
        assert keyed.status_code == 201, keyed.text
    assert await writes(engine) == {**NOTHING_WRITTEN, "keys": 1, "runs": 1}


async def test_a_trusted_proxy_relaying_a_local_client_keeps_keyless_access(engine: Engine) -> None:
    policy = http_policy(
        allowed_hosts=[],
        cors_origins=[],
        trusted_proxies=["10.0.0.0/8"],
        listen_host="127.0.0.1",
        auth="optional",
    )
    async with client_for(create_app(engine, policy=policy), peer="10.1.2.3") as proxy:
        local = await proxy.get("/api/keys", headers={"X-Forwarded-For": "127.0.0.1"})
        assert local.status_code == 200, local.text
        remote = await proxy.get("/api/keys", headers={"X-Forwarded-For": "127.0.0.1, 198.51.100.7"})
        assert error_code(remote, 401) == "unauthorized"
    async with client_for(create_app(engine, policy=policy), peer="192.0.2.1") as stranger:
        spoofed = await stranger.get("/api/keys", headers={"X-Forwarded-For": "127.0.0.1"})
        assert error_code(spoofed, 401) == "unauthorized", "only a trusted proxy's header is believed"


@pytest.mark.parametrize(
    ("host", "auth"),
    [
        ("127.0.0.1", "optional"),
        ("127.8.9.10", "optional"),
        ("localhost", "optional"),
        ("::1", "optional"),
        ("[::1]", "optional"),
        ("::ffff:127.0.0.1", "optional"),
        ("0.0.0.0", "required"),
        ("::", "required"),
        ("127.0.0.1.nip.io", "required"),
        ("127.example.com", "required"),
        ("10.0.0.5", "required"),
        ("my-host", "required"),
    ],
)
def test_auto_auth_judges_loopback_by_the_parsed_address(host: str, auth: str) -> None:
    assert resolve_auth("auto", host) == auth
    assert resolve_auth("required", host) == "required"
    assert resolve_auth("optional", host) == "optional"


def test_the_host_policy_by_listening_address_and_auth() -> None:
    def policy(listen: str, auth: Any, **lists: list[str]) -> HttpPolicy:
        values = {"allowed_hosts": [], "cors_origins": [], "trusted_proxies": [], **lists}
        return http_policy(listen_host=listen, auth=auth, **values)

    assert policy("127.0.0.1", "optional").allowed_hosts == LOOPBACK_NAMES
    assert policy("127.0.0.1", "required").allowed_hosts == LOOPBACK_NAMES
    assert policy("0.0.0.0", "required").allowed_hosts is None  # keys carry the authority
    assert policy("0.0.0.0", "optional").allowed_hosts == LOOPBACK_NAMES
    assert policy("10.0.0.5", "optional").allowed_hosts == (*LOOPBACK_NAMES, "10.0.0.5")
    assert policy("0.0.0.0", "optional", allowed_hosts=["API.example.com"]).allowed_hosts == (
        "api.example.com",
    )
    assert policy("0.0.0.0", "optional", allowed_hosts=["*"]).allowed_hosts is None
    assert policy("0.0.0.0", "required", cors_origins=["*"]).cors_origins == ("*",)
    assert HttpPolicy.default("optional").allowed_hosts == LOOPBACK_NAMES
    assert HttpPolicy.default("required").allowed_hosts is None
    with pytest.raises(ConfigError, match="CORS"):
        policy("127.0.0.1", "optional", cors_origins=["*"])
    with pytest.raises(ConfigError, match="origin"):
        policy("127.0.0.1", "optional", cors_origins=["console.example.com"])
    with pytest.raises(ConfigError, match="TRUSTED_PROXIES"):
        parse_networks(["not-an-ip"], "AGENTFLOW_TRUSTED_PROXIES")


async def test_through_a_real_agentflow_serve(database_url: str, engine: Engine, tmp_path: Path) -> None:
    """``agentflow serve`` with default settings on 127.0.0.1: the whole stack, uvicorn included."""
    await engine.publish_workflow(FLOW)
    server = ServeProcess(worker_env(database_url), tmp_path, worker=False)
    try:
        server.wait_ready()
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            port = server.url.rsplit(":", 1)[1]
            for method, path, body in DANGEROUS:
                raw = _encode(body, None)
                hostile = [
                    ({}, 415, "unsupported_media_type"),
                    ({"Content-Type": "text/plain"}, 415, "unsupported_media_type"),
                    ({"Content-Type": "application/json", "Origin": EVIL}, 403, "cross_origin_request"),
                    ({"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403,
                     "cross_origin_request"),
                    ({"Content-Type": "application/json", "Host": f"evil.example:{port}"}, 421, "host_not_allowed"),
                    ({"Content-Type": "application/json", "X-Forwarded-For": "203.0.113.9"}, 401, "unauthorized"),
                ]  # fmt: skip
                for headers, status, code in hostile:
                    response = await http.request(method, path, content=raw, headers=headers)
                    assert error_code(response, status) == code, (path, headers, response.text)
            assert await writes(engine) == NOTHING_WRITTEN
            same_origin = {"Origin": server.url, "Sec-Fetch-Site": "same-origin"}
            ok = await http.post("/api/ai/workflows/f/runs", json={}, headers=same_origin)
            assert ok.status_code == 201, ok.text
            assert (await http.post("/api/keys", json={"kind": "api", "name": "cli"})).status_code == 201
        assert await engine.db.pool.fetchval("SELECT count(*) FROM runs") == 1
    finally:
        server.stop()
    stderr = server.stderr()
    assert "without an API key" in stderr and "AGENTFLOW_API_AUTH=required" in stderr, stderr[-2000:]
    assert server.error_logs() == {}
