"""Assemble what a worker's runs need from the settings: models, prices, knowledge, the HTTP
client, credentials, the code sandbox (the agents' and the nodes' environments)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from uuid import UUID

from agentflow.agent import script
from agentflow.agent.env import AgentEnv
from agentflow.agent.stops import workspace_breach
from agentflow.core.agent_state import WorkspaceSpend
from agentflow.core.errors import ErrorInfo
from agentflow.core.tools import ToolRegistry
from agentflow.integrations.guarded_http import guarded_client
from agentflow.integrations.mcp_client import McpConnector
from agentflow.integrations.sandbox import CodeSandbox
from agentflow.knowledge.base import KnowledgeBase
from agentflow.llm.base import ModelProvider
from agentflow.llm.pricing_file import load_price_table
from agentflow.llm.scripted import ScriptedProvider
from agentflow.llm.select import resolve_model
from agentflow.nodes.base import NodeEnv
from agentflow.nodes.credential_access import CredentialAccess
from agentflow.nodes.model_access import ModelAccess
from agentflow.nodes.people_access import PeopleAccess
from agentflow.nodes.threads import ToolThreads
from agentflow.nodes.workflow_access import WorkflowAccess
from agentflow.runtime.configs import ConfigCache
from agentflow.runtime.model_timing import timed
from agentflow.settings import Settings, previous_sealing_keys
from agentflow.settings import sealing_key as settings_sealing_key
from agentflow.store.database import Database
from agentflow.store.run_deltas import DeltaWriter

logger = logging.getLogger(__name__)


def default_scripted() -> ScriptedProvider:
    """The scripted provider used when no model is configured (``agentflow.agent.script``)."""
    return ScriptedProvider(script.respond)


def build_agent_env(
    db: Database,
    settings: Settings,
    tools: ToolRegistry,
    threads: ToolThreads,
    *,
    model: ModelProvider | None = None,
) -> AgentEnv:
    """The agent environment of one worker.

    Args:
        model: answer every model call with this provider (tests, the demo); by default each
            workflow's ``model`` (else ``AGENTFLOW_MODEL``, else the scripted provider) decides.
    """
    http = guarded_client(allow=settings.http_allow_list)
    # Model calls get their own client: its deadline covers a whole (long) model answer.
    model_http = guarded_client(allow=settings.http_allow_list, timeout=settings.model_timeout + 5.0)
    scripted = default_scripted()

    given = None if model is None else timed(model)

    def resolve(ref: str | None) -> tuple[ModelProvider, str]:
        if given is not None:
            return given, (ref.split(":", 1)[-1] if ref else given.name)
        # Never raises: a model that cannot be built (no key, unknown provider, bad base URL)
        # answers each request with that error, so the step that asks fails at once, not
        # retryable, with the setting to fix, instead of crashing out of the step.
        provider, name = resolve_model(ref, settings, http_client=model_http, scripted=scripted)
        return timed(provider), name

    return AgentEnv(
        pool=db.pool,
        resolve_model=resolve,
        prices=load_price_table(settings.pricing_file),
        knowledge=KnowledgeBase(db),
        http=http,
        model_http=model_http,
        tools=tools,
        threads=threads,
        workspace_daily_usd=settings.workspace_daily_usd,
        workspace_daily_tokens=settings.workspace_daily_tokens,
        mcp=McpConnector(allow=settings.http_allow_list),
        public_url=settings.base_url,
        reply_to=settings.reply_to,
    )


def node_models(env: AgentEnv) -> ModelAccess:
    """The models of ``env`` for model nodes: the same providers, prices and daily budget."""

    async def over_budget(workspace_id: UUID, known: WorkspaceSpend | None) -> ErrorInfo | None:
        breach = await workspace_breach(
            env.pool, workspace_id, env.workspace_daily_usd, env.workspace_daily_tokens, known
        )
        return (
            None
            if breach is None
            else ErrorInfo(breach.code, breach.message, breach.details, breach.solution)
        )

    def sink(workspace_id: UUID, run_id: UUID, step: int, attempt: int) -> DeltaWriter:
        return DeltaWriter(env.pool, workspace_id, run_id, step, attempt)

    return ModelAccess(env.model, env.prices, over_budget, sink)


def build_node_env(
    db: Database,
    settings: Settings,
    agents: AgentEnv,
    tools: ToolRegistry,
    threads: ToolThreads,
    configs: ConfigCache,
    *,
    sealing_key: Callable[[], bytes] | None = None,
) -> NodeEnv:
    """What a worker's nodes use: the agents' models, HTTP client, MCP connector and (set on
    ``agents`` too) credentials sealed with ``sealing_key`` (default: the settings' key), the
    code sandbox when code steps are on, child workflows (set on ``agents`` too), people."""
    agents.credentials = CredentialAccess(
        db.pool,
        sealing_key or functools.partial(settings_sealing_key, settings, settings.database_url is None),
        agents.http,
        previous_keys=previous_sealing_keys(settings),
    )
    agents.workflows = WorkflowAccess(db.pool, configs.parse)
    return NodeEnv(
        tools,
        threads,
        {},
        models=node_models(agents),
        http=agents.http,
        mcp=agents.mcp,
        code=code_sandbox(settings),
        credentials=agents.credentials,
        workflows=agents.workflows,
        public_url=settings.base_url,
        people=PeopleAccess(db.pool),
        reply_to=settings.reply_to,
    )


def code_sandbox(settings: Settings) -> CodeSandbox | None:
    """The sandbox of code steps as the operator set it up, or None while they are off."""
    if settings.run_code == "off":
        return None
    return CodeSandbox(
        require_namespaces=settings.run_code == "isolated",
        python=settings.run_code_python,
        node=settings.run_code_node,
    )
