"""Credentials without a database: validating what a person sends, splitting it into metadata
and secret, what each kind adds to a request, scrubbing, the OAuth2 token answers, and the
origin binding the guarded transport applies."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from agentflow.core.credentials import (
    KINDS,
    apply,
    check_name,
    is_name,
    parse_spec,
    scrub,
    sealed_with,
)
from agentflow.core.errors import ConfigError, StepFailure
from agentflow.core.sealing import SealBroken, new_sealing_key, seal, unseal
from agentflow.integrations import oauth2
from agentflow.integrations.bound_auth import BoundAuth

TOKEN_URL = "https://auth.example.com/oauth/token"
OAUTH = {"token_url": TOKEN_URL, "client_id": "agentflow"}


@pytest.mark.parametrize(
    ("document", "metadata", "secret"),
    [
        ({"kind": "api_key", "key": "k-123456"},
         {"placement": "header", "parameter": "X-API-Key", "prefix": ""}, {"key": "k-123456"}),
        ({"kind": "api_key", "key": "k-123456", "placement": "query", "parameter": "api_key"},
         {"placement": "query", "parameter": "api_key", "prefix": ""}, {"key": "k-123456"}),
        ({"kind": "basic", "username": "ada", "password": "pä ss"}, {}, {"username": "ada", "password": "pä ss"}),
        ({"kind": "basic", "username": "sk_live_1", "password": ""}, {}, {"username": "sk_live_1", "password": ""}),
        ({"kind": "bearer", "token": "tok-abcdef"}, {}, {"token": "tok-abcdef"}),
        ({"kind": "oauth2_client_credentials", **OAUTH, "client_secret": "cs-1", "scopes": ["a.read", "b:write"]},
         {**OAUTH, "scopes": ["a.read", "b:write"], "client_auth": "basic"}, {"client_secret": "cs-1"}),
        ({"kind": "oauth2_authorization_code", **OAUTH, "refresh_token": "rt-1", "client_auth": "body"},
         {**OAUTH, "scopes": [], "client_auth": "body"}, {"refresh_token": "rt-1"}),
        ({"kind": "oauth2_authorization_code", **OAUTH, "access_token": "at-1", "expires_in": 60},
         {**OAUTH, "scopes": [], "client_auth": "basic"}, {"access_token": "at-1"}),
    ],
)  # fmt: skip
def test_a_credential_splits_into_metadata_shown_and_a_secret_never_shown(
    document: dict[str, Any], metadata: dict[str, Any], secret: dict[str, str]
) -> None:
    spec = parse_spec(document)
    assert spec.kind == document["kind"] and spec.kind in KINDS
    assert spec.metadata() == metadata
    assert spec.secret() == secret
    for value in secret.values():
        if value:
            assert value not in repr(spec) and value not in json.dumps(spec.metadata())


@pytest.mark.parametrize(
    ("document", "path", "words"),
    [
        ({"kind": "api_key", "key": "a\nb"}, "key", "printable ASCII"),
        ({"kind": "api_key", "key": "clé"}, "key", "printable ASCII"),
        ({"kind": "api_key", "key": ""}, "key", "at least 1"),
        ({"kind": "api_key", "key": "k", "parameter": "Host"}, "", "set by the HTTP client"),
        ({"kind": "api_key", "key": "k", "parameter": "X Key"}, "parameter", "should match pattern"),
        ({"kind": "api_key", "key": "k", "placement": "cookie"}, "placement", "'header' or 'query'"),
        ({"kind": "basic", "username": "a:b", "password": "p"}, "username", "must not contain ':'"),
        ({"kind": "basic", "username": "a", "password": "p\r\n"}, "password", "control characters"),
        ({"kind": "bearer"}, "token", "Field required"),
        ({"kind": "bearer", "token": "t", "extra": 1}, "extra", "Extra inputs are not permitted"),
        ({"kind": "bearer", "token": 12345}, "token", "valid string"),
        ({"kind": "oauth2_client_credentials", **OAUTH}, "client_secret", "Field required"),
        ({"kind": "oauth2_client_credentials", **OAUTH, "token_url": "ftp://x/token", "client_secret": "s"},
         "token_url", "should match pattern"),
        ({"kind": "oauth2_client_credentials", **OAUTH, "token_url": "https:///token", "client_secret": "s"},
         "token_url", "with a host"),
        ({"kind": "oauth2_client_credentials", **OAUTH, "client_secret": "s", "scopes": ["a b"]},
         "scopes.0", "should match pattern"),
        ({"kind": "oauth2_authorization_code", **OAUTH, "expires_in": 0}, "expires_in", "greater than or equal"),
        ({"kind": "password"}, "", "does not match any of the expected tags"),
        ({"key": "k"}, "", "Unable to extract tag using discriminator 'kind'"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_with_the_field_and_a_fix(
    document: dict[str, Any], path: str, words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_spec(document)
    assert info.value.code == "credential_invalid" and info.value.info.solution
    first = info.value.info.details["errors"][0]
    assert first["path"] == path and words in first["message"], first


def test_names() -> None:
    assert all(is_name(n) for n in ("crm-api", "A", "stripe.live_2", "x" * 100))
    assert not any(is_name(n) for n in ("", "-x", "a b", "x" * 101, "a/b", "ü", "{{ x }}"))
    assert check_name("crm") == "crm"
    with pytest.raises(ConfigError, match="not a credential name"):
        check_name("a b")


def test_what_each_kind_adds_to_a_request() -> None:
    header = apply(
        "api_key", {"placement": "header", "parameter": "Authorization", "prefix": "Token "}, {"key": "k1"}
    )
    assert (header.headers, header.query, header.secrets) == ({"Authorization": "Token k1"}, {}, ("k1",))
    query = apply(
        "api_key", {"placement": "query", "parameter": "api_key", "prefix": "ignored "}, {"key": "k2"}
    )
    assert (query.headers, query.query) == ({}, {"api_key": "k2"})
    basic = apply("basic", {}, {"username": "ada", "password": "pä:ss"})
    encoded = base64.b64encode("ada:pä:ss".encode()).decode()
    assert basic.headers == {"Authorization": f"Basic {encoded}"} and encoded in basic.secrets
    assert apply("bearer", {}, {"token": "t1"}).headers == {"Authorization": "Bearer t1"}
    oauth = apply("oauth2_client_credentials", OAUTH, {"client_secret": "cs", "access_token": "at1"})
    assert oauth.headers == {"Authorization": "Bearer at1"} and oauth.secrets == ("at1",)
    with pytest.raises(KeyError):
        apply("oauth2_authorization_code", OAUTH, {"refresh_token": "rt"})


def test_scrub_replaces_every_secret_in_nested_json_but_not_short_ones() -> None:
    document = {"a": "Bearer tok-123 and tok-123", "b": ["x", {"tok-123": "tok-1234"}], "n": 5, "s": "abc"}
    assert scrub(document, ("tok-123", "tok-1234", "abc")) == {
        "a": "Bearer [redacted] and [redacted]",
        "b": ["x", {"[redacted]": "[redacted]"}],
        "n": 5,
        "s": "abc",  # three characters: too short to look for
    }
    assert scrub("nothing", ()) == "nothing"


def test_a_sealed_secret_opens_only_for_its_own_workspace_and_name() -> None:
    from uuid import uuid4

    key, workspace = new_sealing_key(), uuid4()
    sealed = seal(key, b'{"token": "t"}', sealed_with(workspace, "crm"))
    assert unseal(key, sealed, sealed_with(workspace, "crm")) == b'{"token": "t"}'
    for other in (sealed_with(workspace, "crm2"), sealed_with(uuid4(), "crm")):
        with pytest.raises(SealBroken):
            unseal(key, sealed, other)


def test_token_answers() -> None:
    ok = json.dumps({"access_token": "at", "expires_in": "3600", "refresh_token": "rt"}).encode()
    assert oauth2.parse_token_response("o", 200, ok) == oauth2.TokenGrant("at", "rt", 3600.0)
    bare = oauth2.parse_token_response("o", 200, b'{"access_token": "at", "expires_in": true}')
    assert bare == oauth2.TokenGrant("at", None, None)
    cases = [
        (400, b'{"error": "invalid_grant", "error_description": "expired"}', "oauth2_grant_refused", False),
        (401, b'{"error": "invalid_client"}', "oauth2_grant_refused", False),
        (503, b"down", "oauth2_token_failed", True),
        (429, b"", "oauth2_token_failed", True),
        (302, b"", "oauth2_token_failed", False),
        (200, b'{"token": "x"}', "oauth2_token_invalid", False),
        (200, b'{"access_token": "a\\nb"}', "oauth2_token_invalid", False),
        (200, b"[1]", "oauth2_token_invalid", False),
    ]
    for status, body, code, retryable in cases:
        with pytest.raises(StepFailure) as info:
            oauth2.parse_token_response("https://auth.example.com", status, body)
        assert (info.value.info.code, info.value.retryable) == (code, retryable), (status, body)
        assert info.value.info.solution
    with pytest.raises(StepFailure) as refused:
        oauth2.parse_token_response("o", 400, b'{"error": "invalid_grant", "error_description": "expired"}')
    assert refused.value.info.details == {
        "origin": "o", "status": 400, "error": "invalid_grant", "error_description": "expired"
    }  # fmt: skip


def test_token_forms() -> None:
    client = oauth2.Client(TOKEN_URL, "app", "s", scopes=("a", "b"))
    assert oauth2.client_credentials_form(client) == {"grant_type": "client_credentials", "scope": "a b"}
    assert oauth2.refresh_form(oauth2.Client(TOKEN_URL, "app", None), "rt") == {
        "grant_type": "refresh_token", "refresh_token": "rt"
    }  # fmt: skip
    assert oauth2.code_form("c", "https://app/cb", None) == {
        "grant_type": "authorization_code", "code": "c", "redirect_uri": "https://app/cb"
    }  # fmt: skip


async def test_a_token_request_authenticates_the_client_and_never_follows_a_redirect() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/moved":
            return httpx.Response(302, headers={"Location": "https://elsewhere.example.com/token"})
        return httpx.Response(200, json={"access_token": "at", "expires_in": 60})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        basic = oauth2.Client(TOKEN_URL, "my app", "s/cr+t", scopes=("r",))
        grant = await oauth2.request_token(http, basic, oauth2.client_credentials_form(basic))
        body = oauth2.Client(TOKEN_URL, "app", "s", client_auth="body")
        await oauth2.request_token(http, body, oauth2.client_credentials_form(body))
        with pytest.raises(StepFailure) as moved:
            await oauth2.request_token(http, oauth2.Client("https://auth.example.com/moved", "a", "s"), {})
    assert grant == oauth2.TokenGrant("at", None, 60.0)
    first, second, moved_request = seen
    # RFC 6749 2.3.1: form-encoded, then joined with ':' and base64-encoded.
    assert first.headers["Authorization"] == "Basic " + base64.b64encode(b"my%20app:s/cr%2Bt").decode()
    assert first.content == b"grant_type=client_credentials&scope=r"
    assert "authorization" not in second.headers
    assert second.content == b"grant_type=client_credentials&client_id=app&client_secret=s"
    assert moved_request.url.path == "/moved" and moved.value.info.code == "oauth2_token_failed"


def test_bound_auth_rides_only_on_hops_to_its_own_origin() -> None:
    bound = BoundAuth.for_url(httpx.URL("https://api.example.com/v1"), {"X-Key": "k"}, {"key": "q"})
    assert bound.applies_to(httpx.URL("https://api.example.com:443/other?x=1"))
    for other in (
        "http://api.example.com/v1",
        "https://api.example.com:8443/v1",
        "https://evil.example.com/v1",
    ):
        assert not bound.applies_to(httpx.URL(other)), other
    url, headers = bound.apply(
        httpx.URL("https://api.example.com/v1?a=1&key=old"), httpx.Headers({"x-key": "mine"})
    )
    assert str(url) == "https://api.example.com/v1?a=1&key=q"
    assert headers.get_list("X-Key") == ["k"]


async def test_a_node_naming_a_credential_on_a_worker_without_the_store_fails_clearly() -> None:
    from uuid import uuid4

    from agentflow.core.graph.action_nodes import HttpRequestNode
    from agentflow.core.step_context import StepContext
    from agentflow.core.tools import ToolRegistry
    from agentflow.nodes.base import NodeEnv
    from agentflow.nodes.http_request import HttpRequestRunner
    from agentflow.nodes.threads import ToolThreads

    sent: list[httpx.Request] = []
    spec = HttpRequestNode.model_validate(
        {"id": "call", "type": "http_request", "url": "https://api.example.com/x", "credential": "crm"}
    )
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(200)))
    ctx = StepContext(uuid4(), uuid4(), uuid4(), step_seq=1, attempt=1, fencing_token=1, payload={})
    with pytest.raises(StepFailure) as info:
        await HttpRequestRunner().run(spec, ctx, NodeEnv(ToolRegistry(), ToolThreads(), {}, http=client))
    assert info.value.info.code == "credentials_unavailable" and not info.value.retryable
    assert sent == [], "nothing is sent without its credential"
