"""The dispatcher: consumes the event log and starts the right runs, once (G3).

For every event and every enabled, non-draft workflow whose trigger lists its topic, the
dispatcher checks the conditions, computes the enrollment key, and either starts a run or
delivers the event to the key's active run; each decision is recorded with its reason. It
all happens in the consumer's transaction, with the cursor: a crash redelivers the batch
and nothing of it is half-applied.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from agentflow.core import planner
from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.errors import StepFailure
from agentflow.core.events import Event
from agentflow.core.records import VersionRecord
from agentflow.core.triggers import conditions_hold, enrollment_key, event_document
from agentflow.runtime import metrics
from agentflow.runtime.configs import ConfigCache
from agentflow.runtime.consumer import EventConsumer
from agentflow.store import dispatch
from agentflow.store.database import Connection, Database

logger = logging.getLogger(__name__)

CONSUMER_NAME = "agentflow.dispatcher"


class Dispatcher:
    """Turns events into runs; use ``consumer()`` to run it."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._configs = ConfigCache(db.pool)

    def consumer(self, *, batch_size: int = 200, poll_interval: float = 1.0) -> EventConsumer:
        """The event consumer that feeds this dispatcher."""
        return EventConsumer(
            self.db, CONSUMER_NAME, self.handle, batch_size=batch_size, poll_interval=poll_interval
        )

    async def handle(self, conn: Connection, batch: list[Event]) -> None:
        """Decide every (event, listening workflow) pair of the batch."""
        listening = [(v, self._configs.parse(v)) for v in await dispatch.listening_workflows(conn)]
        now = datetime.now(UTC)
        for event in batch:
            candidates = [
                (v, c)
                for v, c in listening
                if v.workspace_id == event.workspace_id
                and c.trigger is not None
                and c.trigger.matches_topic(event.topic)
            ]
            if not candidates:
                continue
            done = await dispatch.decided(conn, event.workspace_id, event.topic, [event.message_id])
            for version, config in candidates:
                if (version.workflow_id, event.message_id) not in done:
                    await self._decide(conn, version, config, event, now)

    async def _decide(
        self,
        conn: Connection,
        version: VersionRecord,
        config: AgentConfig | StructuredConfig,
        event: Event,
        now: datetime,
    ) -> None:
        assert config.trigger is not None
        doc = event_document(event)
        matched, why = conditions_hold(config.trigger, event, now)
        decision, key, run_id, reason = "not_matched", None, None, why
        if matched:
            agent_type = config.type if isinstance(config, AgentConfig) else None
            try:
                key = enrollment_key(config.trigger, agent_type, event)
            except StepFailure as failure:
                decision, reason = "key_error", failure.info.to_json()
            else:
                if isinstance(config, StructuredConfig):
                    outcome = await dispatch.start_or_enroll(
                        conn, version.workspace_id, version.workflow_id, version.version, key,
                        config.trigger.enrollment.reuse, config.trigger.mode, event.data,
                        planner.initial_state(config), doc,
                    )  # fmt: skip
                    decision, run_id = outcome.decision, outcome.run_id
                    if outcome.replaced is not None:
                        reason = {"conditions": why, "canceled_run": str(outcome.replaced)}
                    if decision in ("started", "restarted"):
                        metrics.RUNS_STARTED.inc()
                else:
                    decision = "not_runnable"
                    reason = {"conditions": why, "note": "agent workflows cannot run in this version yet"}
        await dispatch.record(
            conn, version.workspace_id, version.workflow_id, doc, decision, key, run_id, reason
        )
