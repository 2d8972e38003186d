"""An MCP server's stored credential, applied to its connection: headers added, query
parameters in the URL; after a 401, an OAuth2 credential's token is refreshed once (one token
request however many steps ask, see ``credential_access``) and the call is made once more.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar
from uuid import UUID

import httpx

from agentflow.core.errors import StepFailure
from agentflow.core.mcp import McpServer
from agentflow.nodes.credential_access import CredentialAccess, Resolved

T = TypeVar("T")


async def credentialed(
    access: CredentialAccess | None, workspace_id: UUID, server: McpServer, where: str
) -> tuple[McpServer, list[Resolved]]:
    """``server`` with its stored ``credential`` applied (its headers added, its query
    parameters in the URL), and the credentials used (to scrub answers of their secrets).

    Raises:
        StepFailure: ``credentials_unavailable`` and the codes of ``CredentialAccess.resolve``.
    """
    if server.credential is None or server.url is None:
        return server, []
    if access is None:
        raise StepFailure(
            "credentials_unavailable",
            f"{where}: this worker was started without access to credentials",
            retryable=False,
            solution="Run the workflow on an agentflow worker.",
        )
    resolved = await access.resolve(workspace_id, server.credential, where)
    return applied(server, resolved), [resolved]


async def with_credential(
    access: CredentialAccess | None,
    workspace_id: UUID,
    server: McpServer,
    where: str,
    call: Callable[[McpServer], Awaitable[T]],
) -> tuple[T, list[Resolved]]:
    """``call(server)`` with the server's credential applied; when the server answers 401 to
    an OAuth2 credential, its token is refreshed and ``call`` made once more. Also returns the
    credentials used (to scrub what the step records).

    Raises:
        StepFailure: what ``call`` raised (a second 401 included), and the credential codes.
    """
    reached, used = await credentialed(access, workspace_id, server, where)
    try:
        return await call(reached), used
    except StepFailure as failure:
        if not (used and used[0].refreshable and failure.info.details.get("http_status") == 401):
            raise
    assert access is not None
    assert server.credential is not None
    fresh = await access.refreshed(workspace_id, server.credential, where, used[0])
    used.append(fresh)
    return await call(applied(server, fresh)), used


def applied(server: McpServer, resolved: Resolved) -> McpServer:
    """``server`` carrying ``resolved``'s headers and query parameters."""
    url = server.url or ""
    if resolved.applied.query:
        url = str(httpx.URL(url).copy_merge_params(resolved.applied.query))
    headers = {**(server.headers or {}), **resolved.applied.headers}
    return server.model_copy(update={"url": url, "headers": headers})
