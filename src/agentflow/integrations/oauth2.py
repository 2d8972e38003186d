"""An OAuth2 client for the token endpoint (RFC 6749): client credentials, refresh tokens and
authorization codes exchanged for access tokens, through the guarded HTTP client.

Token requests never follow redirects (a redirect could carry the client secret to another
host), and failures are :class:`~agentflow.core.errors.StepFailure` codes whose messages and
details hold the token endpoint's origin and its ``error``/``error_description`` only: never
the client secret, a token, or the rest of the answer.

Codes: ``oauth2_token_failed`` (the endpoint could not be reached or answered 5xx/429:
retried), ``oauth2_grant_refused`` (400/401: a wrong client secret, an expired or revoked
refresh token or code), ``oauth2_token_invalid`` (an answer without an access token).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import quote

import httpx

from agentflow.core.errors import StepFailure
from agentflow.core.frozen import frozen
from agentflow.integrations.guarded_http import DEADLINE_EXTENSION
from agentflow.integrations.http_errors import origin_of

TOKEN_TIMEOUT = 20.0
"""Seconds a token request may take (well under the refresh claim, see ``nodes.credential_access``)."""
_EXCERPT = 300


@frozen
class TokenGrant:
    """What the token endpoint granted.

    Attributes:
        access_token: the token to send as ``Authorization: Bearer``.
        refresh_token: a (new) refresh token, when the server sent one.
        expires_in: seconds the access token lasts, when the server said.
    """

    access_token: str
    refresh_token: str | None
    expires_in: float | None


@frozen
class Client:
    """The client's side of a token request.

    Attributes:
        token_url: the token endpoint.
        client_id / client_secret: the client's identity (a public client has no secret).
        client_auth: ``basic`` (HTTP Basic, RFC 6749's default) or ``body`` (form fields).
        scopes: asked for on client-credentials and refresh grants.
    """

    token_url: str
    client_id: str
    client_secret: str | None
    client_auth: Literal["basic", "body"] = "basic"
    scopes: Sequence[str] = ()


def client_credentials_form(client: Client) -> dict[str, str]:
    """The form of a client-credentials grant (RFC 6749 section 4.4.2)."""
    return _with_scope({"grant_type": "client_credentials"}, client)


def refresh_form(client: Client, refresh_token: str) -> dict[str, str]:
    """The form of a refresh-token grant (RFC 6749 section 6)."""
    return _with_scope({"grant_type": "refresh_token", "refresh_token": refresh_token}, client)


def code_form(code: str, redirect_uri: str | None, code_verifier: str | None) -> dict[str, str]:
    """The form of an authorization-code exchange (RFC 6749 section 4.1.3, RFC 7636)."""
    form = {"grant_type": "authorization_code", "code": code}
    if redirect_uri:
        form["redirect_uri"] = redirect_uri
    if code_verifier:
        form["code_verifier"] = code_verifier
    return form


def _with_scope(form: dict[str, str], client: Client) -> dict[str, str]:
    if client.scopes:
        form["scope"] = " ".join(client.scopes)
    return form


async def request_token(
    http: httpx.AsyncClient, client: Client, form: dict[str, str], *, timeout: float = TOKEN_TIMEOUT
) -> TokenGrant:
    """POST ``form`` to the token endpoint, authenticated as ``client``; return the grant.

    Raises:
        StepFailure: ``oauth2_token_failed``, ``oauth2_grant_refused``, ``oauth2_token_invalid``
            (and the guarded client's ``destination_blocked``, as ``oauth2_token_failed``).
    """
    url = httpx.URL(client.token_url)
    origin = origin_of(url)
    body = dict(form)
    headers = {"Accept": "application/json"}
    if client.client_auth == "basic" and client.client_secret is not None:
        # RFC 6749 section 2.3.1: id and secret form-encoded, then joined and base64-encoded.
        pair = f"{quote(client.client_id)}:{quote(client.client_secret)}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    else:
        body["client_id"] = client.client_id
        if client.client_secret is not None:
            body["client_secret"] = client.client_secret
    deadline = asyncio.get_running_loop().time() + timeout
    try:
        response = await http.post(
            url, data=body, headers=headers, follow_redirects=False, timeout=timeout,
            extensions={DEADLINE_EXTENSION: deadline},
        )  # fmt: skip
    except StepFailure as exc:  # the guarded client's refusals (a blocked destination, too large)
        raise StepFailure(
            "oauth2_token_failed",
            f"the OAuth2 token endpoint {origin} could not be used: {exc.info.message}",
            retryable=exc.retryable,
            details={"origin": origin, "cause": exc.info.code},
            solution=exc.info.solution,
        ) from None
    except httpx.HTTPError as exc:
        raise StepFailure(
            "oauth2_token_failed",
            f"the OAuth2 token endpoint {origin} did not answer: {type(exc).__name__}",
            details={"origin": origin},
            solution="The step is retried by its retry policy; check that the token URL is right and up.",
        ) from None
    return parse_token_response(origin, response.status_code, response.content)


def parse_token_response(origin: str, status: int, content: bytes) -> TokenGrant:
    """The grant in a token endpoint's answer (RFC 6749 sections 5.1 and 5.2).

    Raises:
        StepFailure: ``oauth2_token_failed`` (5xx, 429, other unexpected statuses),
            ``oauth2_grant_refused`` (400, 401), ``oauth2_token_invalid`` (no access token).
    """
    document = _json(content)
    if status in (400, 401):
        error = _text(document.get("error")) or "unknown"
        details: dict[str, Any] = {"origin": origin, "status": status, "error": error}
        description = _text(document.get("error_description"))
        if description:
            details["error_description"] = description
        raise StepFailure(
            "oauth2_grant_refused",
            f"the OAuth2 token endpoint {origin} refused the grant ({status} {error})",
            retryable=False,
            details=details,
            solution=(
                "Check the credential's client_id and client_secret (PUT /api/credentials/<name>)."
                if error in ("invalid_client", "unauthorized_client")
                else "The refresh token or code is no longer valid: authorize again and store the new"
                " tokens (PUT /api/credentials/<name>, or POST .../oauth2/callback with a new code)."
            ),
        )
    if status != 200:
        retryable = status >= 500 or status in (408, 429)
        raise StepFailure(
            "oauth2_token_failed",
            f"the OAuth2 token endpoint {origin} answered {status}",
            retryable=retryable,
            details={"origin": origin, "status": status},
            solution="The step is retried by its retry policy."
            if retryable
            else "Check the credential's token_url: it must be the token endpoint itself (no redirect).",
        )
    token = document.get("access_token")
    if not isinstance(token, str) or not token or not token.isascii() or not token.isprintable():
        raise StepFailure(
            "oauth2_token_invalid",
            f"the OAuth2 token endpoint {origin} answered without a usable access_token",
            retryable=False,
            details={"origin": origin, "fields": sorted(document)[:20]},
            solution="Check that token_url is the token endpoint of an OAuth2 server.",
        )
    refresh = document.get("refresh_token")
    return TokenGrant(
        access_token=token,
        refresh_token=refresh
        if isinstance(refresh, str) and refresh.isascii() and refresh.isprintable()
        else None,
        expires_in=_seconds(document.get("expires_in")),
    )


def _json(content: bytes) -> dict[str, Any]:
    try:
        document = json.loads(content)
    except (ValueError, RecursionError):
        return {}
    return document if isinstance(document, dict) else {}


def _text(value: Any) -> str | None:
    return value[:_EXCERPT] if isinstance(value, str) else None


def _seconds(value: Any) -> float | None:
    """``expires_in`` as seconds (some servers send a string), or None when absent or odd."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 10**9:
        return float(value)
    return None
