"""A real OAuth2 authorization server and resource server on 127.0.0.1, for credential tests.

``POST /token`` grants access tokens (RFC 6749): ``client_credentials``, ``refresh_token`` and
``authorization_code`` (codes made with :meth:`OAuth2Server.issue_code`), the client
authenticated by HTTP Basic or by form fields. It counts its grants, can answer slowly
(``delay``) and can expire every token it issued (:meth:`expire_tokens`), so the resource
answers 401 until a new one is fetched. ``/api/...`` is the resource: 200 with the bearer
token it was sent echoed back (to prove the engine scrubs it from step records), 401 for a
token it does not know (``/api/deny...``: 401 for every token). ``/echo/...`` answers any request with its headers and query (no
check), for the other credential kinds.

Example:
    >>> with OAuth2Server(client_id="app", client_secret="s3cret") as server:  # doctest: +SKIP
    ...     server.grants["client_credentials"]
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, unquote, urlsplit


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64


class OAuth2Server:
    """A thread-safe OAuth2 server; use it as a context manager.

    Args:
        client_id / client_secret: the one client it knows.
        expires_in: what new access tokens say they last (None: no ``expires_in``).
        rotate: give a new refresh token on every refresh (the old one stops working).
        delay: seconds the token endpoint waits before answering.
    """

    def __init__(
        self,
        *,
        client_id: str = "agentflow",
        client_secret: str = "client-s3cret-value",
        expires_in: int | None = 3600,
        rotate: bool = True,
        delay: float = 0.0,
    ) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.expires_in = expires_in
        self.rotate = rotate
        self.delay = delay
        self.grants: Counter[str] = Counter()
        """Granted token requests by grant type."""
        self.refused: Counter[str] = Counter()
        """Refused token requests by OAuth2 error."""
        self.forms: list[dict[str, str]] = []
        """Every token request's form (and ``auth``: how the client authenticated)."""
        self.resource_calls: list[tuple[str, str | None]] = []
        """Every request to ``/api/...``: (path, Authorization header)."""
        self._lock = threading.RLock()  # _refuse takes it again inside _token
        self._access: set[str] = set()
        self._refresh: set[str] = set()
        self._codes: set[str] = set()
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="oauth2", daemon=True
        )

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    def issue_code(self) -> str:
        """A new single-use authorization code."""
        code = "code-" + secrets.token_urlsafe(8)
        with self._lock:
            self._codes.add(code)
        return code

    def issue_refresh_token(self) -> str:
        """A refresh token, as if a person had authorized the client earlier."""
        token = "rt-" + secrets.token_urlsafe(12)
        with self._lock:
            self._refresh.add(token)
        return token

    def expire_tokens(self) -> None:
        """Forget every access token issued so far: the resource answers 401 to them."""
        with self._lock:
            self._access.clear()

    def valid_access(self) -> set[str]:
        with self._lock:
            return set(self._access)

    # The token endpoint -------------------------------------------------------------------

    def _token(self, form: dict[str, str], authorization: str | None) -> tuple[int, dict[str, Any]]:
        client_id, client_secret, how = form.get("client_id"), form.get("client_secret"), "body"
        if authorization and authorization.startswith("Basic "):
            pair = base64.b64decode(authorization[6:]).decode()
            user, _, password = pair.partition(":")
            client_id, client_secret, how = unquote(user), unquote(password), "basic"
        with self._lock:
            self.forms.append({**form, "auth": how})
        if (client_id, client_secret) != (self.client_id, self.client_secret):
            return self._refuse(401, "invalid_client")
        grant = form.get("grant_type", "")
        with self._lock:
            if grant == "refresh_token":
                if form.get("refresh_token") not in self._refresh:
                    return self._refuse(400, "invalid_grant")
                if self.rotate:
                    self._refresh.discard(form["refresh_token"])
            elif grant == "authorization_code":
                if form.get("code") not in self._codes:
                    return self._refuse(400, "invalid_grant")
                self._codes.discard(form["code"])
            elif grant != "client_credentials":
                return self._refuse(400, "unsupported_grant_type")
            self.grants[grant] += 1
            access = f"at-{sum(self.grants.values())}-" + secrets.token_urlsafe(12)
            self._access.add(access)
            answer: dict[str, Any] = {"access_token": access, "token_type": "Bearer"}
            if self.expires_in is not None:
                answer["expires_in"] = self.expires_in
            if grant != "client_credentials" and (self.rotate or grant == "authorization_code"):
                answer["refresh_token"] = "rt-" + secrets.token_urlsafe(12)
                self._refresh.add(answer["refresh_token"])
        return 200, answer

    def _refuse(self, status: int, error: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.refused[error] += 1
        return status, {"error": error, "error_description": f"refused: {error}"}

    # Serving ------------------------------------------------------------------------------

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        parts = urlsplit(handler.path)
        authorization = handler.headers.get("Authorization")
        if parts.path == "/token" and handler.command == "POST":
            if self.delay:
                time.sleep(self.delay)
            form = {k: v[0] for k, v in parse_qs(body.decode(), keep_blank_values=True).items()}
            status, answer = self._token(form, authorization)
        elif parts.path.startswith("/api/"):
            with self._lock:
                self.resource_calls.append((parts.path, authorization))
                known = authorization is not None and authorization.removeprefix("Bearer ") in self._access
                known = known and not parts.path.startswith("/api/deny")
            status, answer = (
                (200, {"ok": True, "seen": authorization}) if known else (401, {"error": "bad token"})
            )
        elif parts.path.startswith("/echo/"):
            status = 200
            answer = {"headers": dict(handler.headers.items()), "query": parse_qs(parts.query)}
        else:
            status, answer = 404, {"error": "no such path"}
        payload = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        if status == 401 and parts.path.startswith("/api/"):
            handler.send_header("WWW-Authenticate", 'Bearer error="invalid_token"')
        handler.end_headers()
        handler.wfile.write(payload)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                server._serve(self)

            def do_POST(self) -> None:
                server._serve(self)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler
