"""The interface every node kind implements."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from datetime import timedelta
from typing import Any, Protocol

import httpx

from agentflow.core.agent_state import WorkspaceSpend
from agentflow.core.chat import Spend
from agentflow.core.errors import StepFailure
from agentflow.core.frozen import frozen
from agentflow.core.inbox import EMPTY, Inbox
from agentflow.core.mcp import McpServer
from agentflow.core.node_specs import NodeSpec
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.core.templating import copied, has_templates, render
from agentflow.core.tools import ToolRegistry
from agentflow.integrations.mcp_client import McpConnector
from agentflow.integrations.sandbox import CodeSandbox
from agentflow.nodes.credential_access import CredentialAccess
from agentflow.nodes.model_access import ModelAccess
from agentflow.nodes.people_access import PeopleAccess
from agentflow.nodes.rendering import call_rendering
from agentflow.nodes.threads import ToolThreads
from agentflow.nodes.workflow_access import WorkflowAccess


@frozen
class NodeEnv:
    """What the worker lends node runners.

    Attributes:
        tools: the registered tools.
        threads: runs sync tools, a thread per call.
        template_context: ``payload``, ``steps`` and ``run`` for rendering templates.
        models: the worker's models and prices (None: this worker runs no model nodes).
        http: the worker's guarded HTTP client (None: this worker sends no HTTP requests).
        spent: what the step spent on models so far (recorded even when the step fails).
        inbox: the run's unconsumed deliveries as the step sees them.
        asked: the step that asked a person, when a ``user_input`` node runs again for the answer.
        mcp: the worker's MCP connector (None: ``mcp_tool`` nodes connect without the worker's
            HTTP allow-list, so only public HTTP servers and stdio servers).
        mcp_servers: the run's workflow's ``mcp_servers``.
        attached: the nodes the workflow's agent nodes attach, by id (not part of the graph).
        code: the worker's code sandbox (None: code steps are off, ``run_code_disabled``).
        credentials: the workspace credential store (None: nodes that name a credential fail
            with ``credentials_unavailable``).
        workflows: the workspace's workflows, for ``run_workflow`` (None: it fails with
            ``run_workflow_unavailable``).
        public_url: the API's external base URL, for the callback URLs of ``wait_callback``.
        people: the workspace's people, for whom requests are (None: assignees are taken as
            written; a role fails with ``role_has_no_people``).
        reply_to: where replies to requests' emails go (``AGENTFLOW_REPLY_TO``; None: no
            reply address).
        spend: the workspace's model spend today and its limits as the run's checkpoint just
            before this step returned them (None: unknown; a model call reads them).
    """

    tools: ToolRegistry
    threads: ToolThreads
    template_context: Mapping[str, Any]
    models: ModelAccess | None = None
    http: httpx.AsyncClient | None = None
    spent: list[Spend] = field(default_factory=list)
    inbox: Inbox = EMPTY
    asked: int | None = None
    mcp: McpConnector | None = None
    mcp_servers: tuple[McpServer, ...] = ()
    attached: Mapping[str, NodeSpec] = field(default_factory=dict)
    code: CodeSandbox | None = None
    credentials: CredentialAccess | None = None
    workflows: WorkflowAccess | None = None
    public_url: str = "http://127.0.0.1:8000"
    people: PeopleAccess | None = None
    reply_to: str | None = None
    spend: WorkspaceSpend | None = None

    async def render(self, value: Any, node: str, field: str) -> Any:
        """``value`` with its templates rendered in the template context, off the event loop
        when slow (see ``agentflow.nodes.rendering``).

        Raises:
            StepFailure: ``template_error`` or ``template_limit`` naming ``node`` and ``field``.
        """
        if not has_templates(value):  # most args are partly static; many wholly
            return copied(value)
        return await call_rendering(render, value, self.template_context, field=field, node=node)

    def data(self) -> dict[str, Any]:
        """What conditions and expressions read: ``input``, ``payload``, ``steps``, ``state``."""
        return {name: self.template_context.get(name) for name in ("input", "payload", "steps", "state")}

    async def render_list(
        self, value: Any, node: str, field: str, *, code: str, kind: str = "node"
    ) -> list[Any]:
        """``value`` rendered, which must give a list.

        Raises:
            StepFailure: ``code`` (not retryable) naming the node, the field and what it gave.
        """
        items = await self.render(value, node, field)
        if not isinstance(items, list):
            raise StepFailure(
                code,
                f"{kind} {node!r} field {field} must give a list, not {type(items).__name__}",
                retryable=False,
                details={"node": node, "field": field, "got": type(items).__name__},
                solution=f"Point {field!r} at a list, e.g. '{{{{ input.rows }}}}'.",
            )
        return items

    async def call_sync(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        """Run a blocking function on its own thread."""
        return await self.threads.call(fn, *args, **kwargs)


class NodeRunner(Protocol):
    """Executes one kind of node; must not touch the database (the checkpoint does)."""

    kind: str

    def describe(self, node: NodeSpec) -> str | None:
        """A short name for the step log (e.g. the tool's name)."""
        ...

    def timeout_override(self, node: NodeSpec, env: NodeEnv) -> timedelta | None:
        """A kind-specific default timeout (e.g. the tool's own), or None."""
        ...

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """Execute the node; return the rendered input (for the log) and the result."""
        ...


class BaseRunner:
    """Defaults for runners: no extra name, no kind-specific timeout."""

    kind = ""

    def describe(self, node: NodeSpec) -> str | None:
        """No extra name."""
        return None

    def timeout_override(self, node: NodeSpec, env: NodeEnv) -> timedelta | None:
        """No override."""
        return None
