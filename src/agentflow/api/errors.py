"""The error contract: every error is ``{"error": {"code", "message", "details"?, "solution"?}}``.

Exception handlers turn agentflow's structured errors, request validation errors, HTTP
errors from routing and database outages into that shape, each with a stable code.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentflow.api.route_table import api_routes
from agentflow.core.errors import AgentflowError, ErrorInfo
from agentflow.store.database import UNAVAILABLE_ERRORS, unavailable

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5
"""What ``Retry-After`` says when the database is unavailable."""

DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = UNAVAILABLE_ERRORS
"""Exceptions that may mean "the database cannot serve this now" (503), not "this request is bad".

``agentflow.store.database.unavailable`` has the last word (an ``InterfaceError`` is an
outage only when it is about a closed connection).
"""

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "body_too_large",
    415: "unsupported_media_type",
}


class ApiError(AgentflowError):
    """An error the HTTP layer raises itself, with its own status code.

    Args:
        status_code: the HTTP status.
        code: the stable error code.
        message: what went wrong, for people.
        details: extra facts.
        solution: what to do about it.
    """

    def __init__(
        self,
        status_code: int,
        code: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        solution: str | None = None,
    ) -> None:
        super().__init__(code, message, details=details, solution=solution)
        self.status_code = status_code


def error_response(status_code: int, info: ErrorInfo, headers: dict[str, str] | None = None) -> JSONResponse:
    """The JSON response for ``info`` in the error contract's shape."""
    return JSONResponse({"error": info.to_json()}, status_code=status_code, headers=headers)


def unavailable_response(message: str = "the database is unavailable") -> JSONResponse:
    """503 ``database_unavailable`` with ``Retry-After``."""
    info = ErrorInfo("database_unavailable", message, solution=f"Retry in {RETRY_AFTER_SECONDS} seconds.")
    return error_response(503, info, {"Retry-After": str(RETRY_AFTER_SECONDS)})


def install_handlers(app: FastAPI) -> None:
    """Register every exception handler of the error contract on ``app``."""
    app.add_exception_handler(AgentflowError, _agentflow_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    for exc_type in DATABASE_UNAVAILABLE:
        app.add_exception_handler(exc_type, _database_unavailable)


async def _agentflow_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AgentflowError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
    return error_response(exc.status_code, exc.info, headers)


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [{"path": _path(err.get("loc", ())), "message": str(err.get("msg", ""))} for err in exc.errors()]
    first = errors[0] if errors else {"path": "", "message": "invalid"}
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    info = ErrorInfo(
        "invalid_request",
        f"invalid request at {first['path'] or '(root)'}: {first['message']}{more}",
        {"errors": errors},
        "Correct each listed path; see /docs for the request schema.",
    )
    return error_response(422, info)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    headers = dict(exc.headers or {})
    if exc.status_code == 404:
        message = "no such endpoint"
    if exc.status_code == 405:
        # Starlette names the methods of the first route with this path only; a path served
        # by several routes (GET and PUT /api/accounts/{id}) supports all of theirs.
        allowed = _allowed_methods(request)
        headers["Allow"] = ", ".join(allowed)
        message = f"{request.method} is not supported here; use {', '.join(allowed)}"
    return error_response(exc.status_code, ErrorInfo(code, message), headers)


def _allowed_methods(request: Request) -> list[str]:
    # The path's own routes: where templates overlap (/api/knowledge/plan and
    # /api/knowledge/{document_id}), the one naming more of the path literally is its resource.
    matching = [e for e in api_routes(request.app.router.routes) if e.pattern.match(request.scope["path"])]
    fewest = min((e.path.count("{") for e in matching), default=0)
    return sorted({m for e in matching if e.path.count("{") == fewest for m in e.methods})


async def _database_unavailable(request: Request, exc: Exception) -> JSONResponse:
    if not unavailable(exc):
        raise exc  # a bug, not an outage: the last-resort handler answers 500 and logs it
    logger.warning("database unavailable during %s %s: %r", request.method, request.url.path, exc)
    return unavailable_response()


def _path(loc: Any) -> str:
    """``("body", "nodes", 1, "id")`` -> ``body.nodes[1].id``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path
