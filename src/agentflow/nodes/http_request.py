"""The ``http_request`` node: one HTTP request through the worker's guarded HTTP client (spec in
``agentflow.core.graph.action_nodes``).

Each attempt renders the request, sends it once and reads the answer; the step's retry
policy decides about another attempt. Every attempt carries the same ``Idempotency-Key``
(``run_id:step_seq``), so a server that honours it applies a retried POST once. The guarded
client refuses destinations the allow-list does not open, bodies past its size limit and
exchanges past its deadline; those refusals, transport failures and unexpected statuses
become ``StepFailure`` codes with a solution (``agentflow.nodes.http_failures``), which the
node's ``error`` port can handle.

Messages and error details name the URL's origin (``scheme://host:port``) only: paths and
queries often hold secrets (a webhook's token), and errors end up in logs and the console.

A node's ``credential`` is resolved from the workspace's credential store when the step runs
(``agentflow.nodes.credential_access``) and added by the guarded transport to hops to the
URL's origin only; the step records its name, never what it adds, and its secrets are
scrubbed from the recorded output and errors. After a 401 with an OAuth2 credential the
token is refreshed once and the request sent once more.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx

from agentflow.core.errors import StepFailure
from agentflow.core.frozen import frozen
from agentflow.core.graph.action_nodes import HttpRequestNode, rendered_url_problem
from agentflow.core.node_specs import NodeSpec
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.core.templating import has_templates
from agentflow.integrations.bound_auth import CREDENTIAL_EXTENSION, BoundAuth
from agentflow.integrations.guarded_http import DEADLINE_EXTENSION
from agentflow.integrations.http_errors import origin_of
from agentflow.nodes.base import BaseRunner, NodeEnv
from agentflow.nodes.credential_access import Resolved, scrubbed, scrubbed_failure
from agentflow.nodes.http_failures import EXCERPT_CHARS, response_text, status_failure, transport_failure

IDEMPOTENCY_HEADER = "Idempotency-Key"
REDACTED = "[redacted]"
_SECRET_HEADER = re.compile(r"auth|cookie|token|secret|password|passwd|api[-_]?key|signature", re.IGNORECASE)
_JSON_TYPE = re.compile(r"^application/([a-z0-9.+-]*\+)?json\b")


class HttpRequestRunner(BaseRunner):
    """Render the request, send it through the guarded client, check the status, read the body."""

    kind = "http_request"

    def describe(self, node: NodeSpec) -> str | None:
        """The method, and the origin when the URL is written out (``POST https://api.example.com``)."""
        assert isinstance(node, HttpRequestNode)
        if has_templates(node.url):
            return node.method
        return f"{node.method} {origin_of(httpx.URL(node.url))}"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """``{status, headers, body}`` of the answer is the output; the rendered request, its
        secret-looking headers redacted and its credential by name only, is the step's input."""
        assert isinstance(node, HttpRequestNode)
        if env.http is None:
            raise StepFailure(
                "http_unavailable",
                f"http_request node {node.id!r}: this worker was started without an HTTP client",
                retryable=False,
                details={"node": node.id},
                solution="Run the workflow on an agentflow worker (agentflow worker).",
            )
        request = await _render(node, ctx, env)
        used: list[Resolved] = []
        try:
            response = await _exchange(env.http, node, ctx, env, request, used)
            status = response.status_code
            if not node.accepts(status):
                raise status_failure(node, request.method, request.origin, response)
            output = {
                "status": status,
                "headers": dict(response.headers.items()),
                "body": _body(node, request, response),
            }
        except StepFailure as exc:
            if not used:
                raise
            raise scrubbed_failure(exc, used) from None
        # A server that echoes the credential back must not get it into the step's record.
        return request.logged(), NodeResult(output=scrubbed(output, used))


async def _exchange(
    http: httpx.AsyncClient, node: HttpRequestNode, ctx: StepContext, env: NodeEnv, request: _Request,
    used: list[Resolved],
) -> httpx.Response:  # fmt: skip
    """Send the request, with its credential when it names one; after a 401 with an OAuth2
    credential, refresh the token once and send once more (``used`` collects the credentials
    sent, whose secrets are scrubbed from what the step records)."""
    options = request.send_options()  # one deadline for both sends
    if node.credential is None:
        return await _send(http, node, request, options, None)
    if env.credentials is None:
        raise StepFailure(
            "credentials_unavailable",
            f"http_request node {node.id!r}: this worker was started without access to credentials",
            retryable=False,
            details={"node": node.id, "credential": node.credential},
            solution="Run the workflow on an agentflow worker (agentflow worker).",
        )
    credential = await env.credentials.resolve(ctx.workspace_id, node.credential, node.id)
    used.append(credential)
    response = await _send(http, node, request, options, credential)
    if response.status_code == 401 and credential.refreshable:
        credential = await env.credentials.refreshed(ctx.workspace_id, node.credential, node.id, credential)
        used.append(credential)
        response = await _send(http, node, request, options, credential)
    return response


async def _send(
    http: httpx.AsyncClient, node: HttpRequestNode, request: _Request, options: dict[str, Any],
    credential: Resolved | None,
) -> httpx.Response:  # fmt: skip
    target = request.target()
    if credential is not None:
        # Added by the guarded transport on hops to this origin only (see ``bound_auth``).
        bound = BoundAuth.for_url(target, credential.applied.headers, credential.applied.query)
        options = {**options, "extensions": {**options.get("extensions", {}), CREDENTIAL_EXTENSION: bound}}
    try:
        return await http.request(request.method, target, **options)
    except Exception as exc:  # the guarded client's refusals and every transport failure
        failure = transport_failure(exc, node, request.method, request.origin, request.limit)
        if failure is None:
            raise
        raise failure from None


@frozen
class _Request:
    """A rendered request, ready to send."""

    node: str
    method: str
    url: str
    headers: dict[str, str]
    query: dict[str, str | list[str]]
    form: dict[str, str | list[str]] | None
    content: str | None
    logged_body: tuple[str, Any] | None
    limit: float | None
    credential: str | None = None

    @property
    def origin(self) -> str:
        """``scheme://host:port``: what messages may show."""
        return origin_of(httpx.URL(self.url))

    def target(self) -> httpx.URL:
        """The URL to send to: ``query`` merged into the URL's own (a name in both takes
        ``query``'s value; httpx's ``params`` would drop the URL's query instead)."""
        url = httpx.URL(self.url)
        return url.copy_merge_params(self.query) if self.query else url

    def send_options(self) -> dict[str, Any]:
        """The keyword arguments of ``httpx.AsyncClient.request`` beyond method and URL."""
        options: dict[str, Any] = {"headers": self.headers}
        if self.form is not None:
            options["data"] = self.form
        if self.content is not None:
            options["content"] = self.content.encode()
        if self.limit is not None:
            # The whole exchange (redirects and body included) ends by the node's own time limit
            # instead of the client's default: the transport takes the deadline from here.
            options["timeout"] = self.limit
            options["extensions"] = {DEADLINE_EXTENSION: asyncio.get_running_loop().time() + self.limit}
        return options

    def logged(self) -> dict[str, Any]:
        """What the step records as its input: the request, secret-looking headers redacted, its
        credential by name (what the credential adds is never part of it)."""
        headers = {k: REDACTED if _SECRET_HEADER.search(k) else v for k, v in self.headers.items()}
        doc: dict[str, Any] = {"method": self.method, "url": self.url, "headers": headers}
        if self.credential is not None:
            doc["credential"] = self.credential
        if self.query:
            doc["query"] = self.query
        if self.logged_body is not None:
            doc[self.logged_body[0]] = self.logged_body[1]
        return doc


async def _render(node: HttpRequestNode, ctx: StepContext, env: NodeEnv) -> _Request:
    url = await env.render(node.url, node.id, "url")
    problem = rendered_url_problem(url) if isinstance(url, str) else f"it gave {type(url).__name__}, not text"
    if problem is not None:
        raise StepFailure(
            "http_url_invalid",
            f"http_request node {node.id!r}: the URL is not usable: {problem}",
            retryable=False,
            details={"node": node.id, "field": "url"},
            solution="Make 'url' render to a full http or https URL, e.g. https://api.example.com/v1/items.",
        )
    headers: dict[str, str] = {}
    for name, value in (await env.render(dict(node.headers), node.id, "headers")).items():
        if value is None:
            continue  # a template that found nothing: no header, rather than an empty one
        text = _field_text(value)
        if any(char in text for char in "\r\n\0"):
            raise StepFailure(
                "http_header_invalid",
                f"http_request node {node.id!r}: header {name!r} holds a line break or NUL character",
                retryable=False,
                details={"node": node.id, "field": f"headers.{name}"},
                solution="Strip line breaks from the value the header's template renders.",
            )
        headers[name] = text
    if not any(name.lower() == IDEMPOTENCY_HEADER.lower() for name in headers):
        headers[IDEMPOTENCY_HEADER] = ctx.idempotency_key
    query = _fields(await env.render(node.query, node.id, "query")) if node.query else {}
    form: dict[str, str | list[str]] | None = None
    content: str | None = None
    logged_body: tuple[str, Any] | None = None
    if node.form is not None:
        form = _fields(await env.render(node.form, node.id, "form"))
        logged_body = ("form", form)
    elif node.json_body is not None:
        document = await env.render(node.json_body, node.id, "json")
        content = _json_text(document, node)
        _default_header(headers, "Content-Type", "application/json")
        logged_body = ("json", document)
    elif node.body is not None:
        raw = await env.render(node.body, node.id, "body")
        content = raw if isinstance(raw, str) else _json_text(raw, node)
        logged_body = ("body", content)
    limit = None
    if node.timeout is not None:
        seconds = node.timeout.total_seconds()
        # A little before the step's own limit, so the failure names the exchange (http_timeout).
        limit = max(seconds * 0.9, seconds - 1.0)
    return _Request(
        node.id, node.method, url, headers, query, form, content, logged_body, limit, node.credential
    )


def _field_text(value: Any) -> str:
    """A rendered value as the text of a header, query or form field."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _fields(rendered: dict[str, Any]) -> dict[str, str | list[str]]:
    """Query or form fields as text; a list repeats its name, a null leaves the field out."""
    fields: dict[str, str | list[str]] = {}
    for name, value in rendered.items():
        if isinstance(value, list):
            fields[name] = [_field_text(item) for item in value if item is not None]
        elif value is not None:
            fields[name] = _field_text(value)
    return fields


def _json_text(document: Any, node: HttpRequestNode) -> str:
    try:
        return json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StepFailure(
            "http_body_invalid",
            f"http_request node {node.id!r}: the body is not JSON: {exc}",
            retryable=False,
            details={"node": node.id},
            solution="Make the body's templates give JSON values (no NaN or infinity).",
        ) from None


def _default_header(headers: dict[str, str], name: str, value: str) -> None:
    if not any(key.lower() == name.lower() for key in headers):
        headers[name] = value


def _body(node: HttpRequestNode, request: _Request, response: httpx.Response) -> Any:
    """The body as ``response`` says: JSON, or text (None for HEAD and, but as text, when empty)."""
    if request.method == "HEAD":
        return None
    if node.response == "text":
        return response_text(response)
    if not response.content:  # 204, or an empty answer: null, whatever its type says
        return None
    content_type = response.headers.get("content-type", "").strip().lower()
    if node.response == "auto" and not _JSON_TYPE.match(content_type):
        return response_text(response)
    try:
        return json.loads(response.content)
    except (ValueError, RecursionError):
        if node.response == "auto":  # said JSON, is not: keep what came
            return response_text(response)
        raise StepFailure(
            "http_response_not_json",
            f"http_request node {node.id!r}: {request.method} {request.origin} answered "
            f"{response.status_code} with a body that is not JSON",
            retryable=False,
            details={"node": node.id, "status": response.status_code,
                     "body": response_text(response)[:EXCERPT_CHARS], "content_type": content_type},
            solution="Use response: text (or auto) for this endpoint, or fix the request so it answers JSON.",
        ) from None  # fmt: skip
