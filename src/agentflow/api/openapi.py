"""The OpenAPI document, made true to what the server answers.

FastAPI documents what the routes declare. The middleware in front of them answers too:
every operation can get 400 (a NUL or non-UTF-8 URL), 408/413/415 (a stalled, oversized or
non-JSON body), 421 (a host name not served), 500 and 503; writes can get 403 (a page on
another origin). Keys are optional in loopback mode, which OpenAPI says with an empty
security requirement next to the bearer one.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from agentflow.api.guards import SAFE_METHODS

_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}

EVERY_OPERATION = {
    400: "Malformed request: `unstorable_text` or `invalid_utf8` (the URL), `invalid_json`, `too_deep`,"
    " `unstorable_text`, `number_out_of_range` (the body), `invalid_workspace`...",
    408: "`body_timeout`: the body did not arrive in time",
    413: "`body_too_large`: the body is over 1 MiB",
    415: "`unsupported_media_type`: a body (or a declared Content-Type) that is not JSON",
    421: "`host_not_allowed`: the Host header is not a name this server serves",
    500: "`internal_error`: a bug; the details are in the server log",
    503: "`database_unavailable`: retry after the `Retry-After` seconds",
}
"""What the middleware can answer to any operation."""

WRITES = {403: "`cross_origin_request`: a web page on another origin may not change anything"}
"""What it can answer to an operation that is not GET, HEAD or OPTIONS."""

_PRIVATE = "/api/private/"
_WORKSPACE_HEADER = "x-agentflow-workspace"


def install(app: FastAPI, auth: Literal["required", "optional"]) -> None:
    """Make ``app.openapi()`` return the completed document (built once, on first use)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            complete(doc, auth)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


NO_NUL = "^[^\\u0000]*$"
"""The pattern of every text in a path or query: the boundary refuses NUL (``unstorable_text``)."""


def _no_nul(schema: dict[str, Any]) -> None:
    """Give every unconstrained string in ``schema`` the ``NO_NUL`` pattern."""
    if schema.get("type") == "string" and not ({"pattern", "enum", "format", "const"} & set(schema)):
        schema["pattern"] = NO_NUL
    for key in ("anyOf", "oneOf", "allOf"):
        for part in schema.get(key, []):
            _no_nul(part)
    if isinstance(schema.get("items"), dict):
        _no_nul(schema["items"])


def complete(doc: dict[str, Any], auth: Literal["required", "optional"]) -> None:
    """Add the middleware's answers to every operation; mark keys optional when they are."""
    for path, item in doc.get("paths", {}).items():
        for method, operation in item.items():
            responses: dict[str, Any] = operation.setdefault("responses", {})
            extra = dict(EVERY_OPERATION)
            if method.upper() not in SAFE_METHODS:
                extra.update(WRITES)
            for status, description in extra.items():
                responses.setdefault(str(status), {"description": description, "content": _ERROR})
            for parameter in operation.get("parameters", []):
                if parameter.get("in") in ("path", "query"):
                    _no_nul(parameter.get("schema", {}))
                if parameter.get("in") == "header" and parameter.get("name", "").lower() == _WORKSPACE_HEADER:
                    # The route reads it as text to answer 400 `invalid_workspace` itself (not
                    # FastAPI's 422); on the wire it is a UUID, or absent.
                    parameter["schema"] = {"type": "string", "format": "uuid", "title": "Workspace"}
            security = operation.get("security")
            if auth == "optional" and security and not path.startswith(_PRIVATE):
                # An empty requirement: the call may also be made without any key.
                operation["security"] = [{}, *security]
