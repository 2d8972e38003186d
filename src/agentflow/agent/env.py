"""What the worker lends agent runs: models, prices, knowledge, the guarded HTTP client, tools."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx

from agentflow.core.chat import ModelResponse
from agentflow.core.pricing import PriceTable
from agentflow.core.tools import ToolRegistry
from agentflow.integrations.mcp_client import McpConnector
from agentflow.knowledge.base import KnowledgeBase
from agentflow.llm.base import ModelProvider
from agentflow.nodes.credential_access import CredentialAccess
from agentflow.nodes.model_access import ModelResolver
from agentflow.nodes.threads import ToolThreads
from agentflow.nodes.workflow_access import WorkflowAccess
from agentflow.store.checkpoints import ModelUsage

logger = logging.getLogger(__name__)


@dataclass
class AgentEnv:
    """Everything an agent step needs besides its run.

    Attributes:
        pool: the database pool, for the reads a decision makes (never held across a call).
        resolve_model: picks the provider of a workflow's ``model``.
        prices: USD per million tokens by model.
        knowledge: the knowledge base behind ``generate_plan``.
        http: the guarded HTTP client (HTTP tools, Slack); every URL is checked.
        model_http: the guarded HTTP client of model providers (a longer deadline).
        tools: registered Python tools.
        threads: runs sync tools, a thread per call.
        workspace_daily_usd / workspace_daily_tokens: the default daily workspace budget.
        mcp: connects to MCP servers (with the HTTP allow-list) and keeps their tool listings.
        public_url: the API's external base URL, for the links in approval emails.
        reply_to: where replies to approval emails go (None: no reply address).
        credentials: the workspace credential store, for HTTP tools that name a credential.
        workflows: the workspace's workflows, for an attached ``run_workflow`` (None: its
            calls fail with ``run_workflow_unavailable``).
    """

    pool: asyncpg.Pool
    resolve_model: ModelResolver
    prices: PriceTable
    knowledge: KnowledgeBase
    http: httpx.AsyncClient
    model_http: httpx.AsyncClient
    tools: ToolRegistry
    threads: ToolThreads
    workspace_daily_usd: float = 0.0
    workspace_daily_tokens: int = 0
    mcp: McpConnector = field(default_factory=McpConnector)
    public_url: str = "http://127.0.0.1:8000"
    reply_to: str | None = None
    credentials: CredentialAccess | None = None
    workflows: WorkflowAccess | None = None
    _providers: dict[str | None, tuple[ModelProvider, str]] = field(default_factory=dict)

    def model(self, ref: str | None) -> tuple[ModelProvider, str]:
        """The provider and model name for ``ref``, built once per ref."""
        found = self._providers.get(ref)
        if found is None:
            found = self.resolve_model(ref)
            self._providers[ref] = found
        return found

    def usage_of(self, provider: ModelProvider, model: str, response: ModelResponse) -> ModelUsage:
        """What one model call cost, as a checkpoint records it (``provider:model``, tokens, USD)."""
        return ModelUsage(
            model if model == provider.name else f"{provider.name}:{model}",
            response.usage.input_tokens,
            response.usage.output_tokens,
            response.usage.cached_input_tokens,
            self.prices.cost(response.model or model, response.usage),
        )

    async def aclose(self) -> None:
        """Close the HTTP clients."""
        await self.http.aclose()
        await self.model_http.aclose()

    async def call_sync(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        """Run a blocking tool on its own thread."""
        return await self.threads.call(fn, *args, **kwargs)
