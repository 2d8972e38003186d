"""Who calls an MCP tool, and what they may do (issue 15): the key's workspace, role and name,
carried from the HTTP request to the tool handlers.

A viewer key may read through MCP (list the tools and workflows, follow runs, see pending
requests); starting runs and answering requests need an operator, as the REST routes do. An
answer (and a refused attempt) is written to the audit log as ``request.respond``, like the
REST answer; starts are data plane, recorded on the run (``core.audit``).
"""

from __future__ import annotations

from uuid import UUID

import asyncpg
from pydantic import ValidationError
from starlette.requests import Request

from agentflow.core.errors import AgentflowError, ForbiddenError
from agentflow.core.frozen import frozen
from agentflow.core.roles import Role, allows
from agentflow.store import audit_log

CALLER_SCOPE_KEY = "agentflow.mcp_caller"
"""Where the ASGI scope carries the request's ``Caller`` to the tool handlers."""
READ_TOOLS = frozenset({"get_run", "list_workflows", "list_requests"})
"""Tools a viewer may call; every other one (``start_run``, ``run_<workflow>``,
``answer_request``) needs an operator."""
MCP_ROUTE = "/mcp"


@frozen
class Caller:
    """The authenticated sender of an MCP request."""

    workspace_id: UUID
    role: str
    actor: str  # "key:<id>", or "local" for a keyless request the server trusts
    actor_name: str | None


def caller_of(request: Request, workspace_id: UUID) -> Caller:
    """The caller ``deps.get_workspace`` authenticated for ``request``."""
    state = request.state
    actor, actor_name = getattr(state, "actor", ("local", None))
    return Caller(workspace_id, str(getattr(state, "role", "admin")), str(actor), actor_name)


def check_tool_role(caller: Caller, tool: str) -> None:
    """Refuse a tool the caller's role may not use.

    Raises:
        ForbiddenError: ``role_forbidden``, naming the tool and the role it needs.
    """
    needed: Role = "viewer" if tool in READ_TOOLS else "operator"
    if not allows(caller.role, needed):
        raise ForbiddenError(
            "role_forbidden",
            f"the MCP tool {tool[:130]} needs an API key with the {needed} role or above; this one is"
            f" {caller.role}",
            details={"role": caller.role, "needed": needed},
            solution="Use a key with that role (an admin creates one: agentflow keys create --role).",
        )


async def begin_answer(pool: asyncpg.Pool, caller: Caller, request_id: str) -> int:
    """Begin the audit entry of an answer sent through MCP, before it is checked or made (a
    server that dies meanwhile leaves the entry without a status, as for the REST routes)."""
    return await audit_log.begin(
        pool,
        caller.workspace_id,
        actor=caller.actor,
        actor_name=caller.actor_name,
        role=caller.role,
        action="request.respond",
        method="POST",
        route=MCP_ROUTE,
        target={"request_id": request_id[:100], "tool": "answer_request"},
    )


async def finish_answer(pool: asyncpg.Pool, caller: Caller, entry: int, error: Exception | None) -> None:
    """Finish the entry with the status the REST route would have answered."""
    if error is None:
        status = 200
    elif isinstance(error, AgentflowError):
        status = error.status_code
    else:  # arguments that do not fit the tool's schema are the REST route's 422
        status = 422 if isinstance(error, ValidationError) else 500
    await audit_log.finish(pool, caller.workspace_id, entry, status=status, noted={})
