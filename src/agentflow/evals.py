"""Evals (``engine.evals``, ``agentflow eval``): replay recorded runs of an agent workflow
against a version or a model and compare its decisions with the recorded ones (issue 16).

Conductor, Pydantic Evals and Mastra give their users this; ours needs no dataset: the durable
record of every run is one. See ``agent.replay`` for what a replayed decision sees and
``core.evals`` for what is compared and how the gate decides.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from uuid import UUID

from agentflow.agent.replay import replay_run
from agentflow.core.definitions import AgentConfig
from agentflow.core.errors import ConfigError
from agentflow.core.evals import EvalSummary, Gate
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.records import VersionRecord
from agentflow.core.tools import ToolRegistry, default_registry
from agentflow.llm.base import ModelProvider
from agentflow.nodes.threads import ToolThreads
from agentflow.runtime.agent_setup import build_agent_env
from agentflow.runtime.configs import ConfigCache
from agentflow.settings import Settings
from agentflow.store import replays
from agentflow.store.database import Database

MAX_RUNS = 1000
FindVersion = Callable[[UUID | str, int | None, UUID], Awaitable[VersionRecord]]
"""Reads a version (the latest when the number is None) or raises ``NotFoundError``."""


class Evals:
    """Replays recorded agent runs against a candidate."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        configs: ConfigCache,
        find_version: FindVersion,
        tools: ToolRegistry | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self._configs = configs
        self._find_version = find_version
        self._tools = tools or default_registry

    async def replay(
        self,
        workflow: UUID | str,
        *,
        version: int | None = None,
        model: str | None = None,
        provider: ModelProvider | None = None,
        runs: int = 20,
        gate: Gate | None = None,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> EvalSummary:
        """Ask ``version`` of ``workflow`` (default: the latest) to decide again at every
        decision of its ``runs`` newest ended runs (of any version).

        Args:
            model: the candidate's model (``provider:model``) instead of the version's.
            provider: answer every model call with this provider (tests, offline).
            gate: what the candidate must reach (see ``EvalSummary.failures``).

        Raises:
            NotFoundError: no such workflow or version.
            ConfigError: ``eval_invalid``: not an agent workflow, or ``runs`` out of 1-1000.
        """
        if not 1 <= runs <= MAX_RUNS:
            raise ConfigError("eval_invalid", f"runs must be 1 to {MAX_RUNS}, not {runs}")
        record = await self._find_version(workflow, version, workspace_id)
        config = self._configs.parse(record)
        if not isinstance(config, AgentConfig):
            raise ConfigError(
                "eval_invalid",
                f"workflow {config.name!r} is {config.kind}: evals replay the decisions of agent workflows",
                solution="Name an agent workflow.",
            )
        if model is not None:  # a model that cannot be built fails each decision, saying why
            config = config.model_copy(update={"model": model})
        env = build_agent_env(self.db, self.settings, self._tools, ToolThreads(), model=provider)
        try:
            recorded = await replays.recorded_runs(self.db.pool, workspace_id, record.workflow_id, runs)
            comparisons = [c for run in recorded for c in await replay_run(config, run, env)]
        finally:
            await env.aclose()
        return EvalSummary(len(recorded), comparisons, gate or Gate())
