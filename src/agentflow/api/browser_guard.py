"""Keep web pages out: the ``Host`` allow-list, cross-origin writes, keyless calls via proxies.

When the server needs no API key (loopback mode), anything that can make the machine send
an HTTP request holds its authority, and a browser is such a thing: a page on any site can
POST to ``http://127.0.0.1:8000`` (a "simple" request needs no CORS preflight), and a
DNS-rebinding page can even read the answers (its own name resolves to 127.0.0.1). So:

* ``Host`` must be a name the server serves (421 ``host_not_allowed``): a rebinding page
  sends its own name.
* A write (any method but GET, HEAD, OPTIONS) from a page on another origin is refused (403
  ``cross_origin_request``): its ``Origin`` names another host, or ``Sec-Fetch-Site`` says
  ``cross-site``/``same-site``. Origins listed in ``cors_origins`` are let in, and get CORS
  headers from Starlette's ``CORSMiddleware``.
* A keyless call relayed by a reverse proxy (it carries ``X-Forwarded-For`` or
  ``Forwarded``) is refused unless the proxy is trusted and the client behind it is on
  loopback; see :func:`keyless_refusal` and docs/security.md.
"""

from __future__ import annotations

from typing import Literal

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from agentflow.api.errors import error_response
from agentflow.api.guards import SAFE_METHODS
from agentflow.api.hosts import (
    LOOPBACK_NAMES,
    IpNetwork,
    forwarded,
    forwarded_client,
    host_matches,
    is_loopback,
    normalise_origin,
    parse_ip,
    parse_networks,
    same_origin,
    split_host,
)
from agentflow.core.errors import ConfigError, ErrorInfo
from agentflow.core.frozen import frozen

_CROSS_SITE = frozenset({"cross-site", "same-site"})


@frozen
class HttpPolicy:
    """Who may call the API, from where.

    Attributes:
        allowed_hosts: the ``Host`` names served (see ``hosts.host_matches``); None: any.
        cors_origins: origins (``https://app.example.com``) whose pages may call the API
            cross-origin; ``*`` any (only when keys are required).
        trusted_proxies: peers whose ``X-Forwarded-For`` is believed.
    """

    allowed_hosts: tuple[str, ...] | None = LOOPBACK_NAMES
    cors_origins: tuple[str, ...] = ()
    trusted_proxies: tuple[IpNetwork, ...] = ()

    @classmethod
    def default(cls, auth: Literal["required", "optional"]) -> HttpPolicy:
        """Without settings: any host when keys are required, loopback names otherwise."""
        return cls(allowed_hosts=None if auth == "required" else LOOPBACK_NAMES)


def http_policy(
    *,
    allowed_hosts: list[str],
    cors_origins: list[str],
    trusted_proxies: list[str],
    listen_host: str,
    auth: Literal["required", "optional"],
) -> HttpPolicy:
    """The policy of a server listening on ``listen_host`` (the settings' lists, split).

    With no ``allowed_hosts``: loopback names on a loopback listener; any host when keys are
    required (a page cannot send a key it does not have, so the name it used is harmless);
    otherwise (keys optional on a network address) loopback names plus the listening address.

    Raises:
        ConfigError: ``setting_invalid`` for a malformed origin or proxy, or CORS ``*``
            without required keys.
    """
    hosts: tuple[str, ...] | None
    if allowed_hosts:
        hosts = None if "*" in allowed_hosts else tuple(h.lower() for h in allowed_hosts)
    elif is_loopback(listen_host):
        hosts = LOOPBACK_NAMES
    elif auth == "required":
        hosts = None
    else:
        address = parse_ip(listen_host)
        specific = address is not None and not address.is_unspecified
        hosts = (*LOOPBACK_NAMES, listen_host) if specific else LOOPBACK_NAMES
    return HttpPolicy(
        allowed_hosts=hosts,
        cors_origins=_origins(cors_origins, auth),
        trusted_proxies=parse_networks(trusted_proxies, "AGENTFLOW_TRUSTED_PROXIES"),
    )


def _origins(entries: list[str], auth: str) -> tuple[str, ...]:
    if "*" in entries:
        if auth != "required":
            raise ConfigError(
                "setting_invalid",
                "AGENTFLOW_CORS_ORIGINS=* lets every web page call an API that needs no key",
                solution="List the origins, or set AGENTFLOW_API_AUTH=required.",
            )
        return ("*",)
    try:
        return tuple(normalise_origin(entry) for entry in entries)
    except ValueError as exc:
        raise ConfigError("setting_invalid", f"AGENTFLOW_CORS_ORIGINS: {exc}") from None


class BrowserGuard:
    """Refuse foreign ``Host`` names and cross-origin writes before anything else runs.

    Args:
        app: the wrapped ASGI app.
        policy: what to allow.
    """

    def __init__(self, app: ASGIApp, policy: HttpPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 421 or 403 for a refused request; pass the others on untouched."""
        if scope["type"] == "http":
            refused = self.check(scope["method"], Headers(scope=scope))
            if refused is not None:
                status, info = refused
                await error_response(status, info)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def check(self, method: str, headers: Headers) -> tuple[int, ErrorInfo] | None:
        """The refusal of a request with ``method`` and ``headers``, or None."""
        host = headers.get("host", "")
        if self.policy.allowed_hosts is not None:
            parsed = split_host(host)
            if parsed is None or not host_matches(parsed[0], self.policy.allowed_hosts):
                shown = host[:100] if host else "(none)"
                return 421, ErrorInfo(
                    "host_not_allowed",
                    f"this server does not answer to the host name {shown!r}",
                    solution="Call it by a name it serves (localhost), or add the name to"
                    " AGENTFLOW_ALLOWED_HOSTS.",
                )
        if method.upper() in SAFE_METHODS:
            return None
        origin = headers.get("origin")
        listed = origin is not None and self._cors_allows(origin)
        site = headers.get("sec-fetch-site", "").lower()
        foreign = origin is not None and not listed and not same_origin(origin, host)
        if foreign or (site in _CROSS_SITE and not listed):
            where = f"({origin[:100]})" if origin is not None else f"(Sec-Fetch-Site: {site})"
            return 403, ErrorInfo(
                "cross_origin_request",
                f"a web page on another origin {where} may not change anything on this server",
                solution="Call the API from the server's own origin or a program, or list the page's"
                " origin in AGENTFLOW_CORS_ORIGINS.",
            )
        return None

    def _cors_allows(self, origin: str) -> bool:
        if "*" in self.policy.cors_origins:
            return True
        try:
            return normalise_origin(origin) in self.policy.cors_origins
        except ValueError:
            return False


def keyless_refusal(scope: Scope, policy: HttpPolicy) -> str | None:
    """Why a request without a key may not be served in optional-key mode, or None.

    A request a reverse proxy relayed is not the local client it appears to be (the proxy
    connects from loopback). It is served without a key only when the proxy is one of
    ``trusted_proxies`` and the client it names is on loopback. Proxies that add no
    forwarding header cannot be told apart: docs/security.md says to require keys then.
    """
    headers = Headers(scope=scope)
    if not forwarded(headers):
        return None
    peer = scope.get("client")
    client = forwarded_client(peer[0] if peer else None, headers, policy.trusted_proxies)
    if client is not None and is_loopback(client):
        return None
    return (
        "this request came through a proxy (it carries X-Forwarded-For or Forwarded), and only"
        " local clients may call this server without an API key"
    )
