"""The app's API routes as one flat list, with their full path templates.

FastAPI 0.16x keeps an included router as one entry of ``app.routes`` (an ``_IncludedRouter``
that resolves its routes lazily); older versions copy each route into ``app.routes``. Code
that walks the routes (the 405 ``Allow`` header, the audit and role tables' completeness
tests) reads them here, the same way on both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from fastapi.routing import APIRoute
from starlette.routing import compile_path

from agentflow.core.frozen import frozen


@frozen
class RouteEntry:
    """One API route: its full path template, methods, and the compiled path pattern."""

    path: str
    methods: frozenset[str]
    pattern: re.Pattern[str]
    route: APIRoute


def api_routes(routes: Iterable[Any]) -> list[RouteEntry]:
    """Every ``APIRoute`` under ``routes`` (``app.routes``), included routers flattened."""
    found: list[RouteEntry] = []
    _walk(routes, "", found)
    return found


def _walk(routes: Iterable[Any], prefix: str, found: list[RouteEntry]) -> None:
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            context = getattr(route, "include_context", None)
            _walk(inner.routes, prefix + str(getattr(context, "prefix", "") or ""), found)
        elif isinstance(route, APIRoute):
            path = prefix + route.path
            pattern, _, _ = compile_path(path)
            found.append(RouteEntry(path, frozenset(route.methods or ()), pattern, route))
