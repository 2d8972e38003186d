"""Writing the audit log from the API: an entry begins when an audited request is authenticated
(``begin_entry``, from the workspace dependency, before the role check, so refusals are
recorded too) and ``AuditTrail`` finishes it with the answer's status once the handler is done.
Handlers name what a path does not (``note``: the workflow a publish created)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentflow.core.audit import action_for
from agentflow.store import audit_log

_ENTRY = "audit_entry"
_NOTED = "audit_noted"
_READS = frozenset({"GET", "HEAD", "OPTIONS"})


async def begin_entry(
    request: Request, workspace_id: UUID, *, actor: str, actor_name: str | None, role: str
) -> None:
    """Begin the audit entry of ``request`` if its route is audited."""
    if request.method in _READS:
        return
    route = getattr(request.scope.get("route"), "path", None)
    action = action_for(request.method, route) if route else None
    if action is None or _ENTRY in request.scope.get("state", {}):
        return
    target = {k: str(v) for k, v in request.path_params.items()}
    entry = await audit_log.begin(
        request.app.state.engine.db.pool,
        workspace_id,
        actor=actor,
        actor_name=actor_name,
        role=role,
        action=action,
        method=request.method,
        route=route or "",
        target=target,
    )
    request.scope.setdefault("state", {})[_ENTRY] = (workspace_id, entry)


def note(request: Request, **target: Any) -> None:
    """Add to the target of the request's audit entry what its path does not name."""
    noted: dict[str, Any] = request.scope.setdefault("state", {}).setdefault(_NOTED, {})
    noted.update(
        {k: v if v is None or isinstance(v, bool | int | float | str) else str(v) for k, v in target.items()}
    )


class AuditTrail:
    """ASGI middleware finishing the audit entry a request began with its answer's status (500
    when the handler raised). Reads pass straight through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in _READS:
            await self.app(scope, receive, send)
            return
        scope.setdefault("state", {})  # shared with the handler's request.state, however scopes are copied
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            await _finish(scope, status)


async def _finish(scope: Scope, status: int) -> None:
    state = scope.get("state") or {}
    begun = state.get(_ENTRY)
    if begun is None:
        return
    workspace_id, entry = begun
    await audit_log.finish(
        scope["app"].state.engine.db.pool, workspace_id, entry, status=status, noted=state.get(_NOTED, {})
    )
