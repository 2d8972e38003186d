"""``create_app``: the FastAPI application over one engine."""

from __future__ import annotations

from typing import Literal

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Route

import agentflow
from agentflow.api import (
    accounts,
    audit,
    compat_v2,
    console,
    credentials,
    employees,
    errors,
    events,
    governance,
    health,
    keys,
    knowledge,
    memory,
    metrics,
    node_kinds,
    oauth2_callback,
    openapi,
    people,
    replies,
    reports,
    requests,
    resources,
    run_moves,
    run_search,
    run_stream,
    runs,
    slack,
    tasks,
    triggers,
    workflows,
    workspaces,
)
from agentflow.api.audit_trail import AuditTrail
from agentflow.api.browser_guard import BrowserGuard, HttpPolicy
from agentflow.api.deps import WORKSPACE_HEADER
from agentflow.api.guards import BODY_TIMEOUT_SECONDS, MAX_BODY_BYTES, BodyGuard, CatchAll
from agentflow.api.hosts import is_loopback
from agentflow.api.mcp_server import mcp_app
from agentflow.api.trace_context import TraceContext
from agentflow.engine import Engine

DESCRIPTION = """\
The agentflow HTTP API: publish workflows, start runs and follow them.

Every error is `{"error": {"code", "message", "details"?, "solution"?}}` with a stable `code`.
Authenticate with a workspace API key (`Authorization: Bearer afk_...`); when the server does
not require keys (loopback mode), `X-Agentflow-Workspace: <uuid>` selects a workspace other than
the default. Send bodies as `Content-Type: application/json`. Web pages on other origins may not
write (403 `cross_origin_request`) and the server answers only to its own host names (421
`host_not_allowed`): see docs/security.md.
Webhooks start workflows through `/api/public/trigger/...` (a trigger key, optionally a
Standard Webhooks signature) and `/api/private/trigger/...` (an API key).
"""


def create_app(
    engine: Engine,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    auth: Literal["required", "optional"] = "optional",
    policy: HttpPolicy | None = None,
    body_timeout: float = BODY_TIMEOUT_SECONDS,
) -> FastAPI:
    """The API over ``engine`` (which the caller opens and closes).

    Args:
        engine: the engine every request uses.
        max_body_bytes: the largest request body accepted.
        auth: ``required``: every workspace route needs an API key; ``optional``: a key, when
            sent, selects its workspace (see ``Settings.api_auth``). Public triggers always
            need a trigger key and private triggers an API key.
        policy: the host names served, CORS origins and trusted proxies (see
            ``browser_guard.http_policy``); by default any host when keys are required, else
            loopback names only, no CORS.
        body_timeout: seconds a request body may take to arrive (then 408 ``body_timeout``).

    Returns:
        An ASGI app: run it with uvicorn (``agentflow serve`` does).
    """
    policy = policy or HttpPolicy.default(auth)
    app = FastAPI(title="agentflow", version=agentflow.__version__, description=DESCRIPTION)
    app.state.engine = engine
    app.state.auth = auth
    app.state.policy = policy
    errors.install_handlers(app)
    openapi.install(app, auth)
    routers = (
        health,
        workflows,
        node_kinds,
        run_moves,
        runs,
        run_search,
        run_stream,
        events,
        accounts,
        triggers,
        keys,
        workspaces,
        credentials,
        oauth2_callback,
        tasks,
        knowledge,
        reports,
        governance,
        requests,
        replies,
        people,
        audit,
        resources,
        memory,
        employees,
        slack,
        metrics,
        compat_v2,
    )
    for module in routers:
        app.include_router(module.router)
    console.install(app)
    # MCP over streamable HTTP (a plain route: no lifespan to run, and /mcp itself, not /mcp/).
    app.router.routes.append(Route("/mcp", mcp_app(engine, auth, policy=policy)))
    # Middleware added last runs first: CatchAll, BrowserGuard, (CORS), BodyGuard, TraceContext,
    # AuditTrail, the routes.
    app.add_middleware(AuditTrail)
    app.add_middleware(TraceContext)
    app.add_middleware(BodyGuard, max_bytes=max_body_bytes, timeout=body_timeout)
    if policy.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(policy.cors_origins),
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=[
                "Authorization",
                "Content-Type",
                WORKSPACE_HEADER,
                "Idempotency-Key",
                "traceparent",
                "tracestate",
            ],
            expose_headers=["Location", "Retry-After"],
            max_age=600,
        )
    app.add_middleware(BrowserGuard, policy=policy)
    app.add_middleware(CatchAll)
    return app


def resolve_auth(setting: str, host: str) -> Literal["required", "optional"]:
    """``Settings.api_auth`` for a server listening on ``host``: ``auto`` requires keys unless
    the server listens on a loopback address (or ``localhost``) only, judged by the parsed
    address (``127.0.0.1.example.com`` is a name, not loopback)."""
    if setting in ("required", "optional"):
        return "required" if setting == "required" else "optional"
    return "optional" if is_loopback(host) else "required"
