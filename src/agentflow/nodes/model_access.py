"""What a worker lends model nodes: its models, their prices, and the workspace's budget."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from uuid import UUID

from agentflow.core.agent_state import WorkspaceSpend
from agentflow.core.errors import ErrorInfo
from agentflow.core.frozen import frozen
from agentflow.core.pricing import PriceTable
from agentflow.llm.base import ModelProvider
from agentflow.store.run_deltas import DeltaWriter

ModelResolver = Callable[[str | None], tuple[ModelProvider, str]]
"""Turns a ``model`` (``provider:model`` or None for the default) into a provider and the
vendor's model name; never raises (a model that cannot be built answers with its error)."""

BudgetCheck = Callable[[UUID, WorkspaceSpend | None], Awaitable[ErrorInfo | None]]
"""Whether a workspace has used up today's model budget: the reason, else None. The second
argument: the spend and limits as a checkpoint just returned them (None: read them)."""

SinkFactory = Callable[[UUID, UUID, int, int], DeltaWriter]
"""Makes the sink a streaming step writes its model's text to: (workspace, run, step, attempt)."""


@frozen
class ModelAccess:
    """Models for node runners.

    Attributes:
        resolve: picks the provider of a node's ``model``.
        prices: USD per million tokens by model.
        over_budget: asked before each model call.
        sinks: where a node that streams (``stream: true``) writes its model's text (None:
            this worker streams nothing).
    """

    resolve: ModelResolver
    prices: PriceTable
    over_budget: BudgetCheck
    sinks: SinkFactory | None = None
