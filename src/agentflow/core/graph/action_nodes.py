"""Action nodes: steps that act on the world outside the engine (issue 13).

- ``http_request``: one HTTP request through the worker's guarded HTTP client (seed 002's
  ``http.http_request`` tool as a node): method, URL, headers, query and a JSON, form or raw
  body, all templates; the response's ``{status, headers, body}`` is the output. A ``tool``
  node naming ``http.http_request`` is read as this node (``tool_as_http_request``).

What is checked here, at publish: the method, the shape of each field, that a URL written
without templates is an http(s) URL with a host (and that one whose scheme is written out
says http or https), header names, the ``expect`` patterns and the form of a ``credential``
name. What the URL resolves to is checked when the request is sent
(``agentflow.integrations.guarded_http``); that the credential exists, when the step runs, so a
workflow can be published before its credentials are stored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from agentflow.core.credentials import NAME_PATTERN as CREDENTIAL_NAME
from agentflow.core.node_specs import ANY, AgentToolFields, NodeSpec, register_node_spec

MAX_URL = 8_000
MAX_FIELDS = 100
MAX_BODY = 1_000_000
MAX_EXPECT = 20
SCHEMES = ("http", "https")
RETRYABLE_STATUSES = frozenset({408, 429})
"""Besides every 5xx: the statuses that may pass by trying again later."""

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,200}$")
_FORBIDDEN_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer", "keep-alive"}
)
"""Headers the client owns: framing and routing, which a workflow must not forge."""
_STATUS_CLASS = re.compile(r"^([1-5])xx$", re.IGNORECASE)
_STATUS_RANGE = re.compile(r"^([1-5][0-9]{2})-([1-5][0-9]{2})$")
_STATUS_PATTERN_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "integer", "minimum": 100, "maximum": 599},
        {"type": "string", "pattern": r"^([1-5][xX]{2}|[1-5][0-9]{2}(-[1-5][0-9]{2})?)$"},
    ]
}


def status_range(pattern: Any) -> tuple[int, int]:
    """The lowest and highest status ``pattern`` accepts: ``404``, ``"2xx"`` or ``"200-299"``.

    Raises:
        ValueError: anything else, or a range that is empty.
    """
    if isinstance(pattern, int) and not isinstance(pattern, bool) and 100 <= pattern <= 599:
        return pattern, pattern
    if isinstance(pattern, str):
        text = pattern.strip()
        if text.isdigit() and 100 <= int(text) <= 599:
            return int(text), int(text)
        found = _STATUS_CLASS.fullmatch(text)
        if found:
            low = int(found[1]) * 100
            return low, low + 99
        found = _STATUS_RANGE.fullmatch(text)
        if found and int(found[1]) <= int(found[2]):
            return int(found[1]), int(found[2])
    raise ValueError(f"{pattern!r} is not a status (404), a class (2xx) or a range (200-299) within 100-599")


def _checked_status(pattern: Any) -> Any:
    status_range(pattern)
    return pattern


StatusPattern = Annotated[Any, AfterValidator(_checked_status), WithJsonSchema(_STATUS_PATTERN_SCHEMA)]
"""One entry of ``expect``: a status, a class or a range."""


def _checked_values(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """Query and form fields: each value a template or scalar, or a list of them (a repeated
    field); an object has no place in a URL-encoded pair."""
    for name, item in (value or {}).items():
        if not name:
            raise ValueError("a field name must not be empty")
        items = item if isinstance(item, list) else [item]
        if any(isinstance(one, dict | list) for one in items):
            raise ValueError(f"{name!r} must be a text, number, boolean or a list of them")
    return value


FieldValues = Annotated[dict[str, Any] | None, AfterValidator(_checked_values)]


def is_retryable_status(status: int) -> bool:
    """Whether an unexpected ``status`` may pass by trying again: 408, 429 and every 5xx."""
    return status in RETRYABLE_STATUSES or status >= 500


class HttpRequestNode(AgentToolFields, NodeSpec):
    """Send one HTTP request through the guarded HTTP client (allow-list, response size and
    time limits) and pass on ``{status, headers, body}``. Every value is a template. The
    step's idempotency key goes along as ``Idempotency-Key`` (unless ``headers`` sets one), the
    same on every attempt. A status outside ``expect`` fails the step with ``http_status``:
    408, 429 and 5xx are retried by the node's ``retry`` policy, other statuses are not."""

    model_config = ConfigDict(serialize_by_alias=True)  # ``json`` is stored under its own name

    title: ClassVar[str] = "HTTP request"
    literal_fields: ClassVar[frozenset[str]] = frozenset({"method", "expect", "response", "credential"})
    reference_fields: ClassVar[Mapping[str, str]] = {"credential": "credential"}
    result_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "status": {"type": "integer"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body": ANY,
        },
        "required": ["status", "headers", "body"],
        "additionalProperties": False,
    }
    type: Literal["http_request"] = "http_request"
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = Field(
        default="GET", description="The HTTP method."
    )
    url: str = Field(min_length=1, max_length=MAX_URL, description="An http or https URL (a template).")
    headers: dict[str, str] = Field(
        default_factory=dict, max_length=MAX_FIELDS, description="Request headers; values are templates."
    )
    query: FieldValues = Field(
        default=None,
        max_length=MAX_FIELDS,
        description="Query parameters added to the URL's; values are templates (a list repeats the name).",
    )
    json_body: Any = Field(
        default=None, alias="json", description="A JSON body (any value; strings in it are templates)."
    )
    form: FieldValues = Field(
        default=None,
        max_length=MAX_FIELDS,
        description="Or a form body (application/x-www-form-urlencoded); values are templates.",
    )
    body: str | None = Field(
        default=None,
        max_length=MAX_BODY,
        description="Or a raw body (a template); set its Content-Type in headers.",
    )
    expect: list[StatusPattern] = Field(
        default_factory=lambda: ["2xx"],
        min_length=1,
        max_length=MAX_EXPECT,
        description="Statuses that count as success: 404, '2xx' or '200-299' (default 2xx).",
    )
    response: Literal["auto", "json", "text"] = Field(
        default="auto",
        description="How to read the body: json, text, or auto (JSON when the Content-Type says so).",
    )
    credential: str | None = Field(
        default=None,
        max_length=100,
        pattern=CREDENTIAL_NAME,
        description="The name of a workspace credential to authenticate with (checked when the step"
        " runs: credential_not_found); it is added to requests to the URL's origin only.",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        problem = url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a header name (letters, digits and !#$%&'*+.^_`|~-)")
            if name.lower() in _FORBIDDEN_HEADERS:
                raise ValueError(f"the {name!r} header is set by the HTTP client, not by a workflow")
        return value

    @model_validator(mode="after")
    def _one_body(self) -> HttpRequestNode:
        bodies = [name for name in ("json", "form", "body") if self._body_field(name) is not None]
        if len(bodies) > 1:
            raise ValueError("an http_request node takes at most one of 'json', 'form' or 'body'")
        if bodies and self.method in ("GET", "HEAD"):
            raise ValueError(
                f"a {self.method} request carries no body ('{bodies[0]}'): send data in 'query', or use POST"
            )
        return self

    def _body_field(self, name: str) -> Any:
        return {"json": self.json_body, "form": self.form, "body": self.body}[name]

    def accepts(self, status: int) -> bool:
        """Whether ``status`` is a success by ``expect``."""
        return any(low <= status <= high for low, high in map(status_range, self.expect))

    def declared_schema(self, port: str) -> dict[str, Any]:
        """``{status, headers, body}``; with ``response: text`` the body is a string (null for
        a HEAD request)."""
        if self.response != "text":
            return self.result_schema
        properties = {**self.result_schema["properties"], "body": {"type": ["string", "null"]}}
        return {**self.result_schema, "properties": properties}


def url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as far as can be told before it is rendered, else None.

    A URL without templates must be an http or https URL with a host; one with templates is
    checked for its scheme when the scheme is written out before the first template.
    """
    static = url.split("{{", 1)[0].split("{%", 1)[0]
    if static != url:  # a template decides the rest
        scheme, separator, _ = static.partition("://")
        if separator and scheme.strip().lower() not in SCHEMES:
            return f"the URL's scheme must be http or https, not {scheme.strip()!r}"
        return None
    return rendered_url_problem(url)


def rendered_url_problem(url: str) -> str | None:
    """What is wrong with ``url`` (rendered) as an http or https URL with a host, else None."""
    if any(char.isspace() for char in url):
        return "the URL must not contain spaces or line breaks (encode them, e.g. %20)"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port checks it
    except ValueError as exc:
        return f"the URL cannot be read: {exc}"
    if parts.scheme.lower() not in SCHEMES:
        found = f"{parts.scheme!r}" if parts.scheme else "none"
        return f"the URL's scheme must be http or https, not {found} (e.g. https://api.example.com/v1)"
    if not parts.hostname:
        return "the URL has no host (e.g. https://api.example.com/v1)"
    return None


HTTP_TOOL = "http.http_request"
"""Seed 002's built-in tool name: a ``tool`` node calling it is an ``http_request`` node."""


def tool_as_http_request(raw: dict[str, Any]) -> dict[str, Any] | None:
    """A ``tool`` node naming ``http.http_request`` as the ``http_request`` node it stands for;
    None for any other node.

    The tool's arguments are the node's fields (``method``, ``url``, ``headers``, ``query``,
    ``json``, ``form``, ``body``, ``expect``, ``response``, ``credential``); a ``body`` that
    is not a string is sent as JSON, as seed 002's tool does.
    """
    if raw.get("type") != "tool" or raw.get("tool") != HTTP_TOOL:
        return None
    args = raw.get("args") or {}
    if not isinstance(args, dict):
        return None  # the tool node's own validation names the problem
    args = dict(args)
    if "body" in args and not isinstance(args["body"], str | None) and "json" not in args:
        args["json"] = args.pop("body")
    node = {key: value for key, value in raw.items() if key not in ("tool", "args")}
    for name in set(args) & set(node):  # an argument named like a node field (``id``)...
        node[f"args.{name}"] = args.pop(name)  # ...is refused, at its path, as an unknown field
    return {**node, **args, "type": "http_request"}


def at_args_path(error: dict[str, str], path: str, own: set[str]) -> dict[str, str]:
    """A config error of an ``http.http_request`` tool node at ``path``, moved to its place in
    ``args`` unless it is about one of the node's ``own`` fields (``id``, ``next``, ``retry`` ...)."""
    field = error["path"].removeprefix(f"{path}.").split(".", 1)[0].split("[", 1)[0]
    if field not in own and field != "args" and error["path"] != path:
        return {**error, "path": f"{path}.args.{error['path'].removeprefix(f'{path}.')}"}
    return error


register_node_spec(HttpRequestNode)
