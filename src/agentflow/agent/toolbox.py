"""The tools an agent run's model may call: their schemas, their checks, and running them.

Four kinds: the built-ins (``agentflow.agent.builtins``), Python tools registered with
``@agentflow.tool`` and named in the workflow's ``tools``, the workflow's ``http_tools``
(requests through the guarded HTTP client), and the tools of its ``mcp_servers``
(``<server>__<tool>``, see ``agentflow.agent.mcp_tools``). A name not on the workflow's
allow-list is refused whatever the model says.
"""

from __future__ import annotations

from typing import Any

import httpx

from agentflow.agent import builtins, mcp_tools, node_tools
from agentflow.agent.calls import CallContext, ToolOutcome, refusal
from agentflow.core import json_schemas
from agentflow.core.agent_config import HttpTool
from agentflow.core.agent_state import allowed_tools, enabled_builtins
from agentflow.core.chat import ToolSchema
from agentflow.core.definitions import AgentConfig
from agentflow.core.errors import StepFailure
from agentflow.core.graph.agent_tools import offered_description, offered_parameters
from agentflow.core.step_context import StepContext
from agentflow.core.templating import render
from agentflow.core.tools import ToolRegistry
from agentflow.integrations.bound_auth import CREDENTIAL_EXTENSION, BoundAuth
from agentflow.nodes.credential_access import Resolved, scrubbed, scrubbed_failure
from agentflow.nodes.rendering import call_rendering

MAX_RESULT_CHARS = 16_000


def tool_schemas(config: AgentConfig, registry: ToolRegistry) -> tuple[ToolSchema, ...]:
    """The schemas of every tool the workflow lets its model call."""
    schemas = [_builtin(config, name) for name in enabled_builtins(config)]
    for name in config.tools:
        try:
            spec = registry.get(name)
        except StepFailure:
            continue  # refused when called: the worker lacks the module that defines it
        schemas.append(ToolSchema(name, spec.description or name, _schema_of(spec.args_model)))
    schemas += [ToolSchema(t.name, t.description or t.name, t.parameters) for t in config.http_tools]
    schemas += [ToolSchema(n.id, offered_description(n), offered_parameters(n)) for n in config.node_tools]
    return tuple(schemas)


def check_call(
    config: AgentConfig, registry: ToolRegistry, name: str, arguments: dict[str, Any]
) -> ToolOutcome | None:
    """A refusal when the call is not allowed or its arguments do not fit, else None."""
    if name not in allowed_tools(config):
        return refusal(
            "tool_not_allowed",
            f"{name!r} is not one of this workflow's tools ({', '.join(allowed_tools(config))})",
        )
    schema = _schema(config, registry, name)
    if schema is None:
        return refusal("tool_unavailable", f"no tool named {name!r} is registered in this worker")
    problems = json_schemas.problems(schema, arguments)
    if problems:
        return refusal("invalid_tool_args", f"arguments for {name!r} are invalid: " + "; ".join(problems))
    return None


def check(ctx: CallContext, arguments: dict[str, Any]) -> ToolOutcome | None:
    """``check_call`` for any tool, MCP tools included: a refusal, or None to go ahead."""
    found = mcp_tools.resolve(ctx.config, ctx.call.name)
    if found is not None:
        return mcp_tools.check_call(ctx, *found, arguments)
    return check_call(ctx.config, ctx.env.tools, ctx.call.name, arguments)


def side_effecting(config: AgentConfig, registry: ToolRegistry, name: str) -> bool:
    """Whether the tool changes the world (informational: approvals follow ``approvals``)."""
    if name in ("create_task", "send_notification"):
        return True
    for tool in config.http_tools:
        if tool.name == name:
            return tool.changes_world
    try:
        return registry.get(name).side_effecting
    except StepFailure:
        return False


async def run_call(ctx: CallContext, arguments: dict[str, Any]) -> ToolOutcome:
    """Execute an allowed, checked call.

    Raises:
        StepFailure: a retryable failure of the tool (the step is retried with backoff).
    """
    name = ctx.call.name
    if name == "generate_plan":
        return await builtins.generate_plan(ctx, arguments)
    if name == "create_task":
        return builtins.create_task(ctx, arguments)
    if name == "send_notification":
        return builtins.send_notification(ctx, arguments)
    if name == "wait":
        return builtins.wait(ctx, arguments)
    if name == "complete":
        return builtins.complete(ctx, arguments)
    for tool in ctx.config.http_tools:
        if tool.name == name:
            return await _call_http(ctx, tool, arguments)
    found = mcp_tools.resolve(ctx.config, name)
    if found is not None:
        return await mcp_tools.call(ctx, *found, arguments)
    node = node_tools.node_tool(ctx, name)
    if node is not None:
        return await node_tools.call_node(ctx, node, arguments)
    return await _call_python(ctx, arguments)


def _builtin(config: AgentConfig, name: str) -> ToolSchema:
    return builtins.complete_schema(config.output_schema) if name == "complete" else builtins.SCHEMAS[name]


def _schema(config: AgentConfig, registry: ToolRegistry, name: str) -> dict[str, Any] | None:
    if name in builtins.SCHEMAS:
        return _builtin(config, name).parameters
    for tool in config.http_tools:
        if tool.name == name:
            return tool.parameters
    for node in config.node_tools:
        if node.id == name:
            return offered_parameters(node)
    try:
        return _schema_of(registry.get(name).args_model)
    except StepFailure:
        return None


def _schema_of(model: Any) -> dict[str, Any]:
    schema: dict[str, Any] = model.model_json_schema()
    schema.pop("title", None)
    return schema


async def _call_python(ctx: CallContext, arguments: dict[str, Any]) -> ToolOutcome:
    spec = ctx.env.tools.get(ctx.call.name)
    kwargs = spec.validate_args(arguments)
    step_ctx = StepContext(
        workspace_id=ctx.run.workspace_id,
        run_id=ctx.run.id,
        workflow_id=ctx.run.workflow_id,
        step_seq=ctx.seq,
        attempt=ctx.attempt,
        fencing_token=ctx.token,
        payload=ctx.run.input if isinstance(ctx.run.input, dict) else {"value": ctx.run.input},
    )
    if spec.wants_context:
        kwargs["ctx"] = step_ctx
    output = await spec.fn(**kwargs) if spec.is_async else await ctx.env.call_sync(spec.fn, **kwargs)
    tasks = [{**t.__dict__, "due_at": t.due_at.isoformat() if t.due_at else None} for t in step_ctx.tasks]
    return ToolOutcome(result=output, tasks=tasks)


async def _call_http(ctx: CallContext, tool: HttpTool, arguments: dict[str, Any]) -> ToolOutcome:
    scope = {"args": arguments, "run": {"id": str(ctx.run.id), "workflow_id": str(ctx.run.workflow_id)}}
    where = f"tool {tool.name!r}"
    url = str(await call_rendering(render, tool.url, scope, field=f"{where} url"))
    rendered = await call_rendering(render, dict(tool.headers), scope, field=f"{where} headers")
    headers = {k: str(v) for k, v in rendered.items()}
    headers["Idempotency-Key"] = ctx.idempotency_key
    body: dict[str, Any] = {"params": arguments} if tool.method == "GET" else {"json": arguments}
    options: dict[str, Any] = {"headers": headers, "timeout": tool.timeout.total_seconds(), **body}
    used: list[Resolved] = []
    try:
        response = await _send_http(ctx, tool, url, options, used)
    except StepFailure as exc:
        raise scrubbed_failure(exc, used) from None
    if response.status_code == 429 or response.status_code >= 500:
        raise StepFailure("http_failed", f"{tool.name}: {url} answered {response.status_code}")
    try:
        content: Any = response.json()
    except ValueError:
        content = response.text[:MAX_RESULT_CHARS]
    # A server that echoes the credential back must not get it to the model or the record.
    result = {"status": response.status_code, "body": scrubbed(content, used)}
    if response.status_code >= 400:
        return ToolOutcome(
            result={"error": {"code": "http_error", "message": f"HTTP {response.status_code}"}, **result}
        )
    return ToolOutcome(result=result)


async def _send_http(
    ctx: CallContext, tool: HttpTool, url: str, options: dict[str, Any], used: list[Resolved]
) -> httpx.Response:
    """Send, with the tool's credential when it names one (added by the guarded transport on
    hops to the URL's origin only); after a 401 with an OAuth2 credential, refresh its token
    once and send once more."""
    name, access = tool.credential, ctx.env.credentials
    if name is None:
        return await _request(ctx, tool, url, options, None)
    if access is None:
        raise StepFailure(
            "credentials_unavailable",
            f"{tool.name}: this worker was started without access to credentials",
            retryable=False,
            solution="Run the workflow on an agentflow worker.",
        )
    credential = await access.resolve(ctx.run.workspace_id, name, tool.name)
    used.append(credential)
    response = await _request(ctx, tool, url, options, credential)
    if response.status_code == 401 and credential.refreshable:
        credential = await access.refreshed(ctx.run.workspace_id, name, tool.name, credential)
        used.append(credential)
        response = await _request(ctx, tool, url, options, credential)
    return response


async def _request(
    ctx: CallContext, tool: HttpTool, url: str, options: dict[str, Any], credential: Resolved | None
) -> httpx.Response:
    if credential is not None:
        bound = BoundAuth.for_url(httpx.URL(url), credential.applied.headers, credential.applied.query)
        options = {**options, "extensions": {CREDENTIAL_EXTENSION: bound}}
    try:
        return await ctx.env.http.request(tool.method, url, **options)
    except StepFailure:
        raise  # the guarded client's own verdicts (destination_blocked, response_too_large, ...)
    except httpx.TimeoutException:
        raise StepFailure("http_timeout", f"{tool.name}: {url} did not answer in time") from None
    except httpx.HTTPError as exc:
        raise StepFailure("http_failed", f"{tool.name}: {type(exc).__name__}: {exc}") from None
