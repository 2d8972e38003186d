"""What the worker holding an agent run knows for the run's next decision without reading it.

A decision is built from the run's history, the tasks it created, its account and the
workspace's spend. The worker that holds the run wrote the history itself and gets back the
tasks its checkpoints create, so after the first decision of a claim it reads only what it
cannot know: the history never again (a decision's read no longer grows with the run), the
tasks only after a delivery (every change to a task delivers into the run's inbox), the account
only when the last read is more than a moment old.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agentflow.core.agent_context import HistoryStep
from agentflow.core.frozen import frozen

FRESH_SECS = 1.0
"""How long what a held run's worker got back from a checkpoint or read itself (the workspace's
spend, an agent run's account) stands for a read: the steps of a held run follow their
checkpoint at once; a retry's delay, a long branch or a real model's answer may not."""
AGENT_KIND_PREFIX = "agent."
"""The kinds of step a decision's history holds (``agent.decide``, ``agent.tool`` ...)."""


@frozen
class AgentKnowledge:
    """What a held agent run's next decision needs, as the worker knows it.

    Attributes:
        history: the run's completed agent steps, oldest first (exact: read once with the
            claim's first decision, then each step as the worker checkpointed it).
        tasks: the tasks the run created as last read, with those its checkpoints created
            since; None when one may have changed since (the next decision reads them).
        account: the run's account as last read (None: it has none, or it is unknown).
        account_read_at: when the account was read (the worker's monotonic clock).
    """

    history: tuple[HistoryStep, ...]
    tasks: tuple[dict[str, Any], ...] | None
    account: dict[str, Any] | None
    account_read_at: float

    def with_step(self, step: HistoryStep, status: str) -> AgentKnowledge:
        """After a checkpointed step: a completed agent step joins the history (as the
        decision's read selects them: ``status = 'completed' AND kind LIKE 'agent.%'``)."""
        if status != "completed" or not step.kind.startswith(AGENT_KIND_PREFIX):
            return self
        return replace(self, history=(*self.history, step))

    def with_tasks(self, created: list[dict[str, Any]]) -> AgentKnowledge:
        """After a checkpoint that created ``created`` (as stored, in the read's order)."""
        if not created or self.tasks is None:
            return self
        return replace(self, tasks=(*self.tasks, *created))

    def without_tasks(self) -> AgentKnowledge:
        """After deliveries arrived: a task may have changed, so the tasks are read again."""
        return self if self.tasks is None else replace(self, tasks=None)

    def account_fresh(self, now: float, fresh_secs: float) -> bool:
        """Whether the account read at ``account_read_at`` stands for a read at ``now``."""
        return now - self.account_read_at <= fresh_secs
