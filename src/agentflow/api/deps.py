"""Dependencies of the routes: the engine, the workspace, and ids from the path.

Ids in the path are never validated by FastAPI (that would answer 422): a malformed id
names nothing, so it is a 404 like any unknown id, decided here without a query.
"""

from __future__ import annotations

import re
from typing import Annotated
from uuid import UUID

from fastapi import Depends, Header, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from agentflow.api.audit_trail import begin_entry
from agentflow.api.browser_guard import keyless_refusal
from agentflow.api.errors import ApiError
from agentflow.api.schemas import MAX_VERSION
from agentflow.core.definitions import NAME_PATTERN
from agentflow.core.errors import AuthError, ForbiddenError, NotFoundError
from agentflow.core.roles import Role, allows, required_role
from agentflow.engine import DEFAULT_WORKSPACE, Engine
from agentflow.store import workspaces

WORKSPACE_HEADER = "X-Agentflow-Workspace"
_NAME = re.compile(NAME_PATTERN)
_UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")


def get_engine(request: Request) -> Engine:
    """The engine the app was created with."""
    engine: Engine = request.app.state.engine
    return engine


_BEARER = HTTPBearer(
    auto_error=False,
    description="A workspace API key (afk_...): `Authorization: Bearer <key>`. Required when the server"
    " runs with AGENTFLOW_API_AUTH=required; otherwise it selects the key's workspace.",
)


async def get_workspace(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
    workspace: Annotated[
        str | None,
        Header(
            alias=WORKSPACE_HEADER,
            description="The workspace (tenant) to act in; the default workspace when absent."
            " With an API key, it must be the key's workspace (or absent). 400"
            " `invalid_workspace` when not a UUID, 404 `workspace_not_found` when it names none.",
            json_schema_extra={"format": "uuid"},
        ),
    ] = None,
) -> UUID:
    """The workspace of the request: the API key's, else the ``X-Agentflow-Workspace`` header's.

    Raises:
        AuthError: 401 ``unauthorized`` for a bad key, or no key when the server requires one
            or the request came through a proxy (see ``browser_guard.keyless_refusal``).
        ForbiddenError: 403 ``workspace_mismatch`` when the header names another workspace.
        ApiError: 400 ``invalid_workspace`` when the header is not a UUID.
        NotFoundError: 404 ``workspace_not_found`` when it names no workspace.
    """
    named = _workspace_header(workspace)
    if credentials is not None or "authorization" in request.headers:
        token = credentials.credentials if credentials is not None else ""
        holder = await get_engine(request).keys.authenticate_holder(token, "api")
        key_workspace, role = holder.workspace_id, holder.role
        if named is not None and named != key_workspace:
            raise ForbiddenError(
                "workspace_mismatch",
                f"the API key belongs to another workspace than {WORKSPACE_HEADER} names",
                solution=f"Omit {WORKSPACE_HEADER}, or use a key of that workspace.",
            )
        await begin_entry(
            request, key_workspace, actor=f"key:{holder.key_id}", actor_name=holder.name, role=role
        )
        _check_role(request, role)
        request.state.role, request.state.keyed = role, True
        request.state.actor = (f"key:{holder.key_id}", holder.name)
        return key_workspace
    # No key: the server trusts where the request came from (loopback, or auth not required).
    request.state.role, request.state.keyed = "admin", False
    refusal = (
        "this server requires a workspace API key"
        if request.app.state.auth == "required"
        else keyless_refusal(request.scope, request.app.state.policy)
    )
    if refusal is not None:
        raise AuthError(
            "unauthorized",
            refusal,
            solution="Send 'Authorization: Bearer afk_...' (create a key with 'agentflow keys create').",
        )
    pool = get_engine(request).db.pool
    if named not in (None, DEFAULT_WORKSPACE) and not await workspaces.exists(pool, named):
        raise NotFoundError(
            "workspace_not_found",
            f"no workspace {named} (named by {WORKSPACE_HEADER})",
            solution=f"Send the id of an existing workspace, or omit {WORKSPACE_HEADER} for the default one.",
        )
    chosen = named or DEFAULT_WORKSPACE
    await begin_entry(request, chosen, actor="local", actor_name=None, role="admin")
    return chosen


def _check_role(request: Request, role: Role) -> None:
    """Refuse what the key's role may not do (``agentflow.core.roles``)."""
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    needed = required_role(request.method, path)
    if not allows(role, needed):
        raise ForbiddenError(
            "role_forbidden",
            f"{request.method} {path} needs an API key with the {needed} role or above; this one is {role}",
            details={"role": role, "needed": needed},
            solution="Use a key with that role (an admin creates one: agentflow keys create --role).",
        )


def _workspace_header(value: str | None) -> UUID | None:
    if value is None:
        return None
    if not _UUID.fullmatch(value.strip()):
        raise ApiError(
            400,
            "invalid_workspace",
            f"the {WORKSPACE_HEADER} header must be a workspace id (a UUID)",
            solution=f"Send a UUID in {WORKSPACE_HEADER}, or omit it for the default workspace.",
        )
    return UUID(value.strip())


EngineDep = Annotated[Engine, Depends(get_engine)]
WorkspaceDep = Annotated[UUID, Depends(get_workspace)]


def workflow_ref(value: str) -> UUID | str:
    """A workflow id or name from the path.

    Raises:
        NotFoundError: ``workflow_not_found`` when it can be neither.
    """
    if _UUID.fullmatch(value):
        return UUID(value)
    if _NAME.fullmatch(value):
        return value
    raise NotFoundError("workflow_not_found", f"no workflow {_shown(value)} in this workspace")


def run_ref(value: str) -> UUID:
    """A run id from the path.

    Raises:
        NotFoundError: ``run_not_found`` when it is not a UUID.
    """
    if not _UUID.fullmatch(value):
        raise NotFoundError("run_not_found", f"no run {_shown(value)} in this workspace")
    return UUID(value)


def version_ref(value: str) -> int | None:
    """A version number from the path (``latest`` means the newest).

    Raises:
        NotFoundError: ``version_not_found`` unless it is ``latest`` or 1..2**31-1.
    """
    if value == "latest":
        return None
    if value.isascii() and value.isdigit() and len(value) <= 10 and 1 <= int(value) <= MAX_VERSION:
        return int(value)
    raise NotFoundError("version_not_found", f"no version {_shown(value)} of this workflow")


def _shown(value: str) -> str:
    """A path value, safe and short enough to quote in a message."""
    text = value.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
    return repr(text if len(text) <= 80 else text[:79] + "…")
