"""A cache of parsed workflow versions (they are immutable, so caching is always safe)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import AgentConfig, EmployeeConfig, StructuredConfig
from agentflow.core.errors import NotFoundError
from agentflow.core.graph.agent_nodes import AGENT_NODE, delegated_agent
from agentflow.core.graph.code_nodes import needs_code
from agentflow.core.graph.employee_nodes import RESPONSE_SCHEMA
from agentflow.core.records import RunRecord, VersionRecord
from agentflow.store import workflows


class ConfigCache:
    """Parsed configs by (workspace, workflow, version)."""

    def __init__(self, pool: asyncpg.Pool, size: int = 1024) -> None:
        self._pool = pool
        self._size = size
        self._items: dict[tuple[UUID, UUID, int], AgentConfig | StructuredConfig] = {}
        self._agents: dict[tuple[UUID, UUID, int, str, str], AgentConfig] = {}
        self._code: dict[tuple[UUID, UUID, int], bool] = {}

    async def get(
        self, workspace_id: UUID, workflow_id: UUID, version: int
    ) -> AgentConfig | StructuredConfig:
        """The parsed config of one version."""
        config = self._items.get((workspace_id, workflow_id, version))
        if config is not None:
            return config
        record = await workflows.get_version(self._pool, workspace_id, workflow_id, version)
        if record is None:
            raise NotFoundError("version_not_found", f"workflow {workflow_id} has no version {version}")
        return self.parse(record)

    async def for_run(self, run: RunRecord) -> AgentConfig | StructuredConfig:
        """The config ``run`` executes: its version's, or for the child run of an ``agent``
        node, the agent config that node makes with the prompt it rendered (for an employee's
        run from ``run_employee``, its version's with the assignment's response schema)."""
        config = await self.get(run.workspace_id, run.workflow_id, run.workflow_version)
        schema = run.state.get(RESPONSE_SCHEMA)
        if isinstance(config, EmployeeConfig) and isinstance(schema, dict):
            # An assignment's response_schema is the shape of this run's answer.
            return config.model_copy(update={"output_schema": schema})
        if not isinstance(config, StructuredConfig) or AGENT_NODE not in run.state:
            return config
        key = (
            run.workspace_id, run.workflow_id, run.workflow_version,
            str(run.state[AGENT_NODE]), str(run.state.get("agent_prompt")),
        )  # fmt: skip
        agent = self._agents.get(key)
        if agent is None:
            agent = delegated_agent(config, run.state)
            assert agent is not None
            if len(self._agents) >= self._size:
                self._agents.pop(next(iter(self._agents)))
            self._agents[key] = agent
        return agent

    def needs_code(self, record: VersionRecord) -> bool:
        """Whether the version has ``run_code`` nodes (``code_nodes.needs_code``, once per version)."""
        key = (record.workspace_id, record.workflow_id, record.version)
        needed = self._code.get(key)
        if needed is None:
            needed = needs_code(record.config)
            if len(self._code) >= self._size:
                self._code.pop(next(iter(self._code)))
            self._code[key] = needed
        return needed

    def parse(self, record: VersionRecord) -> AgentConfig | StructuredConfig:
        """The parsed config of a version record (parsed once, then cached)."""
        return self.parse_document(record.workspace_id, record.workflow_id, record.version, record.config)

    def parse_document(
        self, workspace_id: UUID, workflow_id: UUID, version: int, document: dict[str, Any]
    ) -> AgentConfig | StructuredConfig:
        """The parsed config of a stored version document (parsed once, then cached)."""
        key = (workspace_id, workflow_id, version)
        config = self._items.get(key)
        if config is None:
            config = validate_config(document, stored=True)
            if len(self._items) >= self._size:
                self._items.pop(next(iter(self._items)))
            self._items[key] = config
        return config
