"""Which lifecycle events anybody listens to (``core.lifecycle``), so a checkpoint publishes
only those.

A lifecycle event starts runs only of a workflow whose trigger (or an agent's sources) names
its topic, and the dispatcher reads the log from its cursor on, never events from before a
listener was published. So an event that no enabled workflow listens to would start nothing,
ever: it is not written, and runs that nobody watches cost no extra writes (measured: about a
sixth of W1's throughput when every run tells its start and end). The topic patterns of the
listening workflows of each workspace are read again every ``ttl`` seconds; a workflow
published meanwhile hears of runs from the next read on.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import replace
from uuid import UUID

from agentflow.core.lifecycle import RUN_CANCELED, TOPICS, lifecycle_events
from agentflow.core.records import RunRecord
from agentflow.core.sources import TopicPatterns
from agentflow.runtime.admission import BatchStarts, topics_of
from agentflow.runtime.configs import ConfigCache
from agentflow.runtime.leases import LocalWorker
from agentflow.runtime.step import StepOutcome
from agentflow.store import dispatch
from agentflow.store.database import Database, unavailable

TTL = 5.0


class LifecycleListeners:
    """The topic patterns the enabled workflows of each workspace listen to, read every ``ttl``."""

    def __init__(self, db: Database, configs: ConfigCache, ttl: float = TTL) -> None:
        self._db = db
        self._configs = configs
        self._ttl = ttl
        self._read_at = float("-inf")
        self._patterns: dict[UUID, TopicPatterns] = {}
        self._told: dict[UUID, frozenset[str]] = {}  # the lifecycle topics heard, by workspace

    async def refresh(self) -> None:
        """Read the patterns again when the last read is older than ``ttl``."""
        if time.monotonic() - self._read_at < self._ttl:
            return
        patterns: dict[UUID, list[str]] = defaultdict(list)
        async with self._db.pool.acquire() as conn:
            for version in await dispatch.listening_workflows(conn):
                patterns[version.workspace_id] += topics_of(self._configs.parse(version))
        self._patterns = {workspace: TopicPatterns(listened) for workspace, listened in patterns.items()}
        self._told = {
            workspace: frozenset(topic for topic in TOPICS if compiled.matches(topic))
            for workspace, compiled in self._patterns.items()
        }
        self._read_at = time.monotonic()

    def heard(self, workspace_id: UUID, topic: str) -> bool:
        """Whether an enabled workflow of the workspace listens to ``topic``."""
        compiled = self._patterns.get(workspace_id)
        return compiled is not None and compiled.matches(topic)

    async def tells(self, workspace_id: UUID, topic: str) -> bool:
        """Whether to publish ``topic`` now (read again when the last read is old; on an
        outage, the last answer)."""
        try:
            await self.refresh()
        except Exception as exc:
            if not unavailable(exc):
                raise
        return self.heard(workspace_id, topic)

    async def audience(self, topic: str) -> list[UUID]:
        """The workspaces with a workflow that listens to ``topic`` (read again when the last
        read is old; on an outage, the last answer)."""
        try:
            await self.refresh()
        except Exception as exc:
            if not unavailable(exc):
                raise
        return [workspace for workspace, compiled in self._patterns.items() if compiled.matches(topic)]

    async def telling_cancels(self, workspace_id: UUID, local: LocalWorker | None = None) -> BatchStarts:
        """How a start outside the dispatcher's batch (a webhook call, a gate's verdict, a
        closing debounce window) treats the run its trigger's ``restart`` mode cancels: it
        tells ``run.canceled`` when a workflow of the workspace listens. ``local``: the worker
        that takes the run it starts, eagerly (see ``BatchStarts``)."""
        hears = self._db.settings.lifecycle_events and await self.tells(workspace_id, RUN_CANCELED)
        return BatchStarts(together=False, hears_canceled=(workspace_id,) if hears else (), local=local)

    async def with_events(
        self, run: RunRecord, outcome: StepOutcome, first_seq: int | None = None
    ) -> StepOutcome:
        """``outcome`` with the lifecycle events its checkpoint publishes: those a workflow of
        the run's workspace listens to (``first_seq``: the first step it writes, when pure
        steps ran before it)."""
        try:
            await self.refresh()
        except Exception as exc:
            if not unavailable(exc):
                raise
            # No fresh answer: the checkpoint meets the outage too; the last answer serves.
        told = self._told.get(run.workspace_id)
        if not told:  # the usual checkpoint: nobody in the workspace listens to runs
            return outcome
        written, effects = outcome.step, outcome.effects
        events = lifecycle_events(
            run,
            status=outcome.run.status,
            reason=outcome.run.status_reason,
            error=outcome.run.error,
            step={"seq": written.seq, "attempt": written.attempt, "node_id": written.node_id,
                  "kind": written.kind, "status": written.status, "error": written.error},
            request=effects.approval,
            first_seq=first_seq,
        )  # fmt: skip
        events = [e for e in events if e["topic"] in told]
        return replace(outcome, effects=replace(effects, events=events)) if events else outcome
