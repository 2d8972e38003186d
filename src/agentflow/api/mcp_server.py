"""MCP over streamable HTTP at ``/mcp``: a workspace's workflows as tools for MCP clients.

Tools: ``start_run``, ``get_run``, ``list_workflows``, ``list_requests``, ``answer_request``,
and ``run_<workflow>`` per published, enabled workflow, whose input schema is its
``payload_format`` (spaces in names become ``_``; names that then collide get none). The list
is made per ``tools/list`` from the caller's workspace, so it follows publishes at once.

The workspace is decided by ``deps.get_workspace``, as for every REST route: the API key's;
with ``auth="required"`` a request without a valid key gets 401 before MCP sees it; with
``auth="optional"`` no key means the default workspace. Serving is stateless with JSON
responses: the SDK's session manager lives for one request, so no session outlives it, any API
process can answer any request, and the app needs no lifespan (uvicorn runs without one here).

Engine errors are tool results with ``isError``: text ``<code>: <message>``, structured content
``{"error": {...}}`` as in the REST contract. Other failures are logged, answered ``internal_error``.
The SDK is imported on the first request: most uses of the API never need it.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

import orjson
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import to_jsonable_python
from starlette.datastructures import State
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

import agentflow
from agentflow.api.browser_guard import HttpPolicy
from agentflow.api.deps import WORKSPACE_HEADER, get_workspace, workflow_ref
from agentflow.api.errors import DATABASE_UNAVAILABLE, error_response, unavailable_response
from agentflow.api.mcp_callers import (
    CALLER_SCOPE_KEY,
    Caller,
    begin_answer,
    caller_of,
    check_tool_role,
    finish_answer,
)
from agentflow.core.errors import AgentflowError, ErrorInfo, NotFoundError
from agentflow.core.payload_format import FieldSpec, normalise
from agentflow.core.records import RunRecord, WorkflowRecord
from agentflow.engine import Engine
from agentflow.store import workflows
from agentflow.store.database import unavailable

if TYPE_CHECKING:
    import mcp_types as types
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server

logger = logging.getLogger(__name__)

RUN_PREFIX = "run_"
MAX_WORKFLOW_TOOLS = 100
"""``run_<workflow>`` tools listed at most (each costs a query per listing)."""
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_BEARER = HTTPBearer(auto_error=False)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartRunArgs(_Args):
    """Start a run of a workflow."""

    workflow: str = Field(max_length=200, description="The workflow's name or id.")
    payload: Any = Field(default=None, description="The run's input, checked against its payload_format.")


class GetRunArgs(_Args):
    """Get a run."""

    run_id: str = Field(max_length=100, description="The id start_run returned.")


class NoArgs(_Args):
    """No arguments."""


class AnswerRequestArgs(_Args):
    """Answer a request to people."""

    request_id: str = Field(max_length=100, description="The id list_requests returned.")
    approved: bool | None = Field(default=None, description="Approvals and reviews: yes or no.")
    response: Any = Field(
        default=None, description="An input's form values, a selection's value, or a review's edited value."
    )
    reason: str | None = Field(default=None, max_length=2000, description="Why (reaches an agent's model).")
    responded_by: str | None = Field(default=None, max_length=200, description="Who answers.")


BUILTIN_TOOLS: dict[str, tuple[type[_Args], str]] = {
    "start_run": (StartRunArgs, "Start a run of a workflow (by name or id); returns run_id and status."),
    "get_run": (GetRunArgs, "A run's status, status_reason, output and error."),
    "list_workflows": (NoArgs, "The workspace's workflows: name, kind, latest version, enabled, draft."),
    "list_requests": (NoArgs, "Requests to people that wait for an answer (approvals, inputs, ...)."),
    "answer_request": (AnswerRequestArgs, "Answer a pending request; its run goes on with the answer."),
}


def mcp_app(
    engine: Engine, auth: Literal["required", "optional"], *, policy: HttpPolicy | None = None
) -> McpApp:
    """The MCP endpoint over ``engine``, an ASGI app to route at ``/mcp``.

    Args:
        engine: the engine every tool uses (the caller opens and closes it).
        auth: as for ``create_app``: ``required`` answers 401 to a request without a valid key.
        policy: the API's ``HttpPolicy`` (which proxied keyless requests to refuse); by default
            ``HttpPolicy.default(auth)``.
    """
    return McpApp(engine, auth, policy or HttpPolicy.default(auth))


class McpApp:
    """The ASGI app ``mcp_app`` returns: authenticate, then serve one MCP request statelessly.

    Attributes:
        state: what ``deps.get_workspace`` reads from ``request.app.state`` (the engine, the
            auth mode, the policy): this app stands in for the API's there.
    """

    def __init__(self, engine: Engine, auth: Literal["required", "optional"], policy: HttpPolicy) -> None:
        self.engine = engine
        self.state = State({"engine": engine, "auth": auth, "policy": policy})
        self._server: Server[Any] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one HTTP request (other scopes, such as a lifespan, have nothing to do here)."""
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            # Stateless: no session to end (DELETE), nothing ever pushed on a GET stream, which would
            # only hold a connection open; the transport's spec answers both with 405.
            info = ErrorInfo("method_not_allowed", f"{scope['method']} is not supported here; use POST")
            await error_response(405, info, {"Allow": "POST"})(scope, receive, send)
            return
        try:
            request = Request({**scope, "app": self}, receive)
            workspace = await get_workspace(
                request, await _BEARER(request), request.headers.get(WORKSPACE_HEADER)
            )
        except AgentflowError as exc:
            headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
            await error_response(exc.status_code, exc.info, headers)(scope, receive, send)
            return
        except DATABASE_UNAVAILABLE as exc:
            if not unavailable(exc):
                raise
            await unavailable_response()(scope, receive, send)
            return
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        manager = StreamableHTTPSessionManager(self._mcp_server(), stateless=True, json_response=True)
        async with manager.run():
            caller = caller_of(request, workspace)
            await manager.handle_request({**scope, CALLER_SCOPE_KEY: caller}, receive, send)

    def _mcp_server(self) -> Server[Any]:
        if self._server is None:
            from mcp.server.lowlevel import Server

            tools = _Tools(self.engine)
            self._server = Server(
                "agentflow",
                version=agentflow.__version__,
                on_list_tools=tools.list_tools,
                on_call_tool=tools.call_tool,
                # Mcp-Param header checks need a schema that annotates headers; none of ours does,
                # and without this the SDK would list the tools (a query per workflow) per call.
                get_tool_input_schema=lambda _name: None,
            )
        return self._server


class _Tools:
    """The handlers of ``tools/list`` and ``tools/call`` over one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        tools = [
            types.Tool(name=name, description=text, input_schema=model.model_json_schema())
            for name, (model, text) in BUILTIN_TOOLS.items()
        ]
        try:
            tools += await self._workflow_tools(_workspace_of(ctx))
        except Exception as exc:  # never a traceback on the wire: the code and message, or a generic one
            info = _error_info(exc)
            raise MCPError(types.INTERNAL_ERROR, f"{info.code}: {info.message}") from None
        # Every listing is the caller's workspace as it is now: nobody may reuse it later.
        return types.ListToolsResult(tools=tools, ttl_ms=0, cache_scope="private")

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        arguments = params.arguments or {}
        try:
            workspace = _workspace_of(ctx)
            if params.name == "answer_request":
                data = await self._answer(_caller_of(ctx), arguments, workspace)
            elif params.name in BUILTIN_TOOLS:
                check_tool_role(_caller_of(ctx), params.name)
                data = await self._builtin(params.name, arguments, workspace)
            else:
                found = await self.engine.list_workflows(workspace_id=workspace)
                workflow = _offered(found).get(params.name)
                if workflow is None:
                    raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name[:130]!r}")
                check_tool_role(_caller_of(ctx), params.name)
                data = _started(await self.engine.start_run(workflow.id, arguments, workspace_id=workspace))
        except MCPError:
            raise
        except Exception as exc:  # every failure is the tool's answer, for the client's model to read
            return _result({}, _error_info(exc))
        return _result(data)

    async def _answer(self, caller: Caller, arguments: dict[str, Any], workspace: UUID) -> dict[str, Any]:
        """``answer_request``, recorded in the audit log whether it was answered or refused."""
        pool, asked = self.engine.db.pool, arguments.get("request_id")
        entry = await begin_answer(pool, caller, asked if isinstance(asked, str) else "")
        error: Exception | None = None
        try:
            check_tool_role(caller, "answer_request")
            return await self._builtin("answer_request", arguments, workspace)
        except Exception as exc:
            error = exc
            raise
        finally:
            await finish_answer(pool, caller, entry, error)

    async def _builtin(self, name: str, arguments: dict[str, Any], workspace: UUID) -> dict[str, Any]:
        engine = self.engine
        args = BUILTIN_TOOLS[name][0].model_validate(arguments)
        if isinstance(args, StartRunArgs):
            return _started(
                await engine.start_run(workflow_ref(args.workflow), args.payload, workspace_id=workspace)
            )
        if isinstance(args, GetRunArgs):
            run = await engine.get_run(args.run_id, workspace_id=workspace)
            more = {"status_reason": run.status_reason, "output": run.output, "error": run.error}
            return {**_started(run), **more}
        if isinstance(args, AnswerRequestArgs):
            answered = await engine.requests.respond(
                _request_id(args.request_id), approved=args.approved, response=args.response,
                reason=args.reason, responded_by=args.responded_by, via="api", workspace_id=workspace,
            )  # fmt: skip
            return {k: answered.get(k) for k in ("id", "run_id", "status", "responded_by")}
        if name == "list_workflows":
            shown = ("id", "name", "kind", "latest_version", "enabled", "draft")
            found = await engine.list_workflows(workspace_id=workspace)
            return {"workflows": [{k: getattr(w, k) for k in shown} for w in found]}
        pending = await engine.requests.list(status="pending", workspace_id=workspace)
        keys = ("id", "run_id", "kind", "message", "node_id", "tool", "assignees", "spec", "expires_at")
        return {"requests": [{k: r.get(k) for k in keys} for r in pending]}

    async def _workflow_tools(self, workspace: UUID) -> list[types.Tool]:
        import mcp_types as types

        tools = []
        for name, workflow in _offered(await self.engine.list_workflows(workspace_id=workspace)).items():
            version = await workflows.get_version(
                self.engine.db.pool, workspace, workflow.id, workflow.latest_version
            )
            config = version.config if version is not None else {}
            about = config.get("description") or f"Start a run of the workflow {workflow.name!r}."
            text = f"{about}\nThe arguments are the run's payload; returns run_id and status (see get_run)."
            tools.append(types.Tool(name=name, description=text, input_schema=payload_schema(config)))
        return tools


def _offered(found: list[WorkflowRecord]) -> dict[str, WorkflowRecord]:
    """The workflows with a ``run_<name>`` tool, by tool name: published, enabled, unambiguous."""
    by_name: dict[str, list[WorkflowRecord]] = {}
    for workflow in found:
        name = RUN_PREFIX + workflow.name.replace(" ", "_")
        if workflow.enabled and not workflow.draft and _TOOL_NAME.fullmatch(name):
            by_name.setdefault(name, []).append(workflow)
    offered = {name: same[0] for name, same in by_name.items() if len(same) == 1}
    return dict(list(offered.items())[:MAX_WORKFLOW_TOOLS])


def payload_schema(config: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema of a version's ``payload_format`` (any object when it declares none)."""
    properties: dict[str, Any] = {}
    required = []
    for name, raw in (normalise(config.get("payload_format")) or {}).items():
        try:
            spec = FieldSpec.model_validate(raw)
        except ValidationError:
            continue  # stored configs were validated at publish; a field this cannot read is left open
        prop: dict[str, Any] = {"type": spec.type}
        if spec.type in ("date", "datetime"):  # ISO 8601 strings, as payload_format checks them
            prop = {"type": "string", "format": "date" if spec.type == "date" else "date-time"}
        if spec.description:
            prop["description"] = spec.description
        properties[name] = prop
        if spec.required:
            required.append(name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _workspace_of(ctx: ServerRequestContext[Any]) -> UUID:
    """The workspace ``McpApp`` authenticated for the HTTP request carrying this message."""
    return _caller_of(ctx).workspace_id


def _caller_of(ctx: ServerRequestContext[Any]) -> Caller:
    """The caller ``McpApp`` authenticated for the HTTP request carrying this message."""
    request = ctx.request
    caller = request.scope.get(CALLER_SCOPE_KEY) if isinstance(request, Request) else None
    if not isinstance(caller, Caller):
        raise RuntimeError("an MCP message arrived without the caller of its HTTP request")
    return caller


def _request_id(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise NotFoundError("request_not_found", f"no request {value[:80]!r} in this workspace") from None


def _started(run: RunRecord) -> dict[str, Any]:
    return {"run_id": run.id, "status": run.status}


def _error_info(exc: Exception) -> ErrorInfo:
    """What a client may learn of a failure: an engine error as it is, an outage, or nothing."""
    if isinstance(exc, AgentflowError):
        return exc.info
    if isinstance(exc, ValidationError):
        where = [f"{'.'.join(map(str, e['loc'])) or '(arguments)'}: {e['msg']}" for e in exc.errors()]
        return ErrorInfo(
            "invalid_arguments", f"the arguments do not fit the tool's schema: {'; '.join(where)}"
        )
    if isinstance(exc, DATABASE_UNAVAILABLE) and unavailable(exc):
        return ErrorInfo("database_unavailable", "the database is unavailable", solution="Retry soon.")
    logger.exception("an MCP tool failed")
    return ErrorInfo("internal_error", "the server failed to do this; its log says why")


def _result(data: dict[str, Any], error: ErrorInfo | None = None) -> types.CallToolResult:
    """``data`` as structured content and as JSON text; or ``error`` as ``<code>: <message>``."""
    import mcp_types as types

    plain = to_jsonable_python(data if error is None else {"error": error.to_json()})
    text = orjson.dumps(plain).decode()
    if error is not None:
        text = f"{error.code}: {error.message}" + (f" ({error.solution})" if error.solution else "")
    block = types.TextContent(text=text)
    return types.CallToolResult(content=[block], structured_content=plain, is_error=error is not None)
