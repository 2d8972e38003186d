"""Publishing a workflow config (``Engine.publish_workflow``): parse, check, store a version."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

from agentflow.core.config_validation import config_document, content_hash, parse_config_text, validate_config
from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.graph.code_nodes import refuse_code_steps
from agentflow.core.references import references_of
from agentflow.nodes.workflow_access import refuse_unknown_children
from agentflow.settings import Settings
from agentflow.store import workflows
from agentflow.store.database import Database
from agentflow.store.workflows import Published

Config = dict[str, Any] | str | Path | AgentConfig | StructuredConfig
"""A config as a dict, YAML/JSON text, a file path, or already parsed."""


async def publish(
    db: Database,
    settings: Settings,
    config: Config,
    *,
    draft: bool | None,
    enabled: bool | None,
    workspace_id: UUID,
) -> Published:
    """Validate and publish ``config``; see ``Engine.publish_workflow``."""
    parsed = parse(config)
    if settings.run_code == "off" and isinstance(parsed, StructuredConfig):
        refuse_code_steps(parsed.nodes)
    if isinstance(parsed, StructuredConfig):
        await refuse_unknown_children(db.pool, workspace_id, parsed)
    document = config_document(parsed)
    return await workflows.publish(
        db.pool, workspace_id, name=parsed.name, kind=parsed.kind, document=document,
        digest=content_hash(document), draft=draft, enabled=enabled,
        scheduled=parsed.schedule is not None, refs=references_of(parsed),
    )  # fmt: skip


def parse(config: Config) -> AgentConfig | StructuredConfig:
    """The parsed config (``ConfigError`` listing every offending path when invalid)."""
    if isinstance(config, AgentConfig | StructuredConfig):
        return config
    if isinstance(config, Path):
        return parse_config_text(config.read_text(), str(config))
    if isinstance(config, str):
        return parse_config_text(config)
    return validate_config(config)
