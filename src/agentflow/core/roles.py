"""What an API key's role lets it do (issue 15): ``viewer`` reads, ``operator`` also runs things,
``admin`` also manages the workspace (keys, credentials, people, budgets, the workspace). The
rule is a function of the request's method and route, so every route is covered by default:
a new write route needs an operator unless it is listed as an admin's."""

from __future__ import annotations

from typing import Literal

Role = Literal["admin", "operator", "viewer"]
ROLES: tuple[Role, ...] = ("admin", "operator", "viewer")
_RANK: dict[str, int] = {"viewer": 0, "operator": 1, "admin": 2}
READS = frozenset({"GET", "HEAD", "OPTIONS"})
ADMIN_WRITES = (
    "/api/keys",
    "/api/credentials",
    "/api/people",
    "/api/budget",
    "/api/workspaces",
    "/api/ai/workflows/{workflow_id}/webhook-secret",
)
"""Routes that manage the workspace itself: changing anything under them is an admin's."""
ADMIN_READS = ("/api/keys",)
"""Routes an admin alone may read: who holds which key."""
CHECKED_PER_OPERATION = ("/mcp",)
"""Routes any key may send to, whose handler checks each operation's role itself (the MCP
endpoint reads and writes through one POST: ``api.mcp_callers``)."""


def required_role(method: str, route: str) -> Role:
    """The least role that may send ``method`` to ``route`` (its path template)."""
    if route in CHECKED_PER_OPERATION:
        return "viewer"
    prefixes = ADMIN_READS if method.upper() in READS else ADMIN_WRITES
    if any(route == prefix or route.startswith(prefix + "/") for prefix in prefixes):
        return "admin"
    return "viewer" if method.upper() in READS else "operator"


def allows(role: str, needed: Role) -> bool:
    """Whether ``role`` may do what needs ``needed``."""
    return _RANK.get(role, -1) >= _RANK[needed]
