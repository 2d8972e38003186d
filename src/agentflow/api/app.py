"""``create_app``: the FastAPI application over one engine."""

from __future__ import annotations

from fastapi import FastAPI

import agentflow
from agentflow.api import errors, events, health, metrics, runs, workflows
from agentflow.api.guards import MAX_BODY_BYTES, BodyGuard, CatchAll
from agentflow.engine import Engine

DESCRIPTION = """\
The agentflow HTTP API: publish workflows, start runs and follow them.

Every error is `{"error": {"code", "message", "details"?, "solution"?}}` with a stable `code`.
Send `X-Agentflow-Workspace: <uuid>` to act in a workspace other than the default one.
"""


def create_app(engine: Engine, *, max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    """The API over ``engine`` (which the caller opens and closes).

    Args:
        engine: the engine every request uses.
        max_body_bytes: the largest request body accepted.

    Returns:
        An ASGI app: run it with uvicorn (``agentflow serve`` does).
    """
    app = FastAPI(title="agentflow", version=agentflow.__version__, description=DESCRIPTION)
    app.state.engine = engine
    errors.install_handlers(app)
    for module in (health, workflows, runs, events, metrics):
        app.include_router(module.router)
    # Middleware added last runs first: CatchAll wraps BodyGuard wraps the routes.
    app.add_middleware(BodyGuard, max_bytes=max_body_bytes)
    app.add_middleware(CatchAll)
    return app
