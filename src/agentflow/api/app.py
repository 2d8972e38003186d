"""``create_app``: the FastAPI application over one engine."""

from __future__ import annotations

from typing import Literal

from fastapi import FastAPI

import agentflow
from agentflow.api import (
    accounts,
    errors,
    events,
    governance,
    health,
    keys,
    knowledge,
    metrics,
    reports,
    runs,
    tasks,
    triggers,
    workflows,
)
from agentflow.api.guards import MAX_BODY_BYTES, BodyGuard, CatchAll
from agentflow.engine import Engine

DESCRIPTION = """\
The agentflow HTTP API: publish workflows, start runs and follow them.

Every error is `{"error": {"code", "message", "details"?, "solution"?}}` with a stable `code`.
Authenticate with a workspace API key (`Authorization: Bearer afk_...`); when the server does
not require keys, `X-Agentflow-Workspace: <uuid>` selects a workspace other than the default.
Webhooks start workflows through `/api/public/trigger/...` (a trigger key, optionally a
Standard Webhooks signature) and `/api/private/trigger/...` (an API key).
"""


def create_app(
    engine: Engine,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    auth: Literal["required", "optional"] = "optional",
) -> FastAPI:
    """The API over ``engine`` (which the caller opens and closes).

    Args:
        engine: the engine every request uses.
        max_body_bytes: the largest request body accepted.
        auth: ``required``: every workspace route needs an API key; ``optional``: a key, when
            sent, selects its workspace (see ``Settings.api_auth``). Public triggers always
            need a trigger key and private triggers an API key.

    Returns:
        An ASGI app: run it with uvicorn (``agentflow serve`` does).
    """
    app = FastAPI(title="agentflow", version=agentflow.__version__, description=DESCRIPTION)
    app.state.engine = engine
    app.state.auth = auth
    errors.install_handlers(app)
    routers = (
        health,
        workflows,
        runs,
        events,
        accounts,
        triggers,
        keys,
        tasks,
        knowledge,
        reports,
        governance,
        metrics,
    )
    for module in routers:
        app.include_router(module.router)
    # Middleware added last runs first: CatchAll wraps BodyGuard wraps the routes.
    app.add_middleware(BodyGuard, max_bytes=max_body_bytes)
    app.add_middleware(CatchAll)
    return app


def resolve_auth(setting: str, host: str) -> Literal["required", "optional"]:
    """``Settings.api_auth`` for a server listening on ``host``: ``auto`` requires keys unless
    the server listens on a loopback address only."""
    if setting in ("required", "optional"):
        return "required" if setting == "required" else "optional"
    loopback = host in ("localhost", "::1") or host.startswith("127.")
    return "optional" if loopback else "required"
