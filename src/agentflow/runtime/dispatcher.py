"""The dispatcher: consumes the event log and starts the right runs, once (G3).

For every event and every enabled, non-draft workflow whose trigger lists its topic (or, for
an agent workflow, whose sources include it), the dispatcher admits the event (conditions,
gate, debounce, then start or enroll; see ``admission``) and records the decision with its
reason. Before that, it answers the runs that wait for the batch's events (``event_waits``).
It all happens in the consumer's transaction, with the cursor: a crash redelivers the batch
and nothing of it is half-applied.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from agentflow.core.events import Event
from agentflow.core.records import VersionRecord
from agentflow.core.sources import topic_matches
from agentflow.core.triggers import conditions_match, event_document
from agentflow.runtime.admission import Config, Decision, Entry, admit, record, topics_of, trigger_of
from agentflow.runtime.configs import ConfigCache
from agentflow.runtime.consumer import EventConsumer
from agentflow.runtime.event_waits import answer_waits
from agentflow.store import decisions, dispatch
from agentflow.store.database import Connection, Database, unavailable

logger = logging.getLogger(__name__)

CONSUMER_NAME = "agentflow.dispatcher"


class Dispatcher:
    """Turns events into runs; use ``consumer()`` to run it."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._configs = ConfigCache(db.pool)
        # The listening versions of the last batch: their configs are not read again.
        self._versions: dict[tuple[UUID, UUID, int], VersionRecord] = {}
        # After a batch failed, the next one is decided pair by pair in savepoints, so one
        # poison (event, workflow) pair is recorded as an error instead of blocking the log.
        self._careful = False

    def consumer(self, *, batch_size: int = 200, poll_interval: float = 1.0) -> EventConsumer:
        """The event consumer that feeds this dispatcher."""
        return EventConsumer(
            self.db, CONSUMER_NAME, self.handle, batch_size=batch_size, poll_interval=poll_interval
        )

    async def handle(self, conn: Connection, batch: list[Event]) -> None:
        """Decide every (event, listening workflow) pair of the batch; record the decisions in
        one statement at the end.

        Raises:
            Exception: whatever failed (the consumer rolls the batch back and delivers it
                again; that delivery is decided pair by pair, see ``_careful``).
        """
        careful, self._careful = self._careful, True
        # Runs waiting for these events first (runtime.event_waits), in this transaction too.
        if not careful:
            await answer_waits(conn, batch, datetime.now(UTC))
        else:
            try:
                async with conn.transaction():  # a savepoint: a failure here blocks no workflow
                    await answer_waits(conn, batch, datetime.now(UTC))
            except Exception as exc:
                if unavailable(exc):
                    raise
                logger.exception("answering event waits of a batch failed")
        listening = []
        versions = await dispatch.listening_workflows(conn, self._versions)
        self._versions = {(v.workspace_id, v.workflow_id, v.version): v for v in versions}
        for version in versions:
            config = self._configs.parse(version)
            listening.append((version, config, topics_of(config)))
        by_topic: dict[tuple[UUID, str], list[tuple[VersionRecord, Config]]] = {}
        pairs = []
        for event in batch:
            # Workflows indexed by (workspace, topic) for the batch: a topic's filters are
            # matched once, not once per event.
            at = (event.workspace_id, event.topic)
            if at not in by_topic:
                by_topic[at] = [
                    (version, config)
                    for version, config, topics in listening
                    if version.workspace_id == event.workspace_id and topic_matches(topics, event.topic)
                ]
            pairs += [(event, version, config) for version, config in by_topic[at]]
        if not pairs:
            self._careful = False
            return
        done = await decisions.decided(conn, [(e.workspace_id, e.topic, e.message_id) for e in batch])
        now = datetime.now(UTC)
        decided: list[Entry] = []
        documents: dict[int, dict[str, Any]] = {}  # by id(event): built once per event
        for event, version, config in pairs:
            if (event.workspace_id, version.workflow_id, event.topic, event.message_id) in done:
                continue
            try:
                document = documents.get(id(event))
                if document is None:
                    document = documents[id(event)] = event_document(event)
                matched = conditions_match(trigger_of(config), document, now)
            except Exception as exc:  # a condition the parser let through but cannot evaluate
                logger.exception("conditions failed on %s %s", event.topic, event.message_id)
                error = {"error": type(exc).__name__, "message": str(exc)[:1000]}
                decided.append((version, event, Decision("error", reason=error)))
                continue
            if not matched:  # explained when read (eventlog), not here: most pairs end so
                decided.append(
                    decisions.Miss(
                        version.workspace_id,
                        version.workflow_id,
                        version.version,
                        event.topic,
                        event.message_id,
                    )
                )
                continue
            if not careful:
                decided.append((version, event, await admit(conn, version, config, event, "event", now)))
                continue
            try:
                async with conn.transaction():  # a savepoint
                    decision = await admit(conn, version, config, event, "event", now)
            except Exception as exc:
                if unavailable(exc):
                    raise
                logger.exception("dispatch of %s %s failed", event.topic, event.message_id)
                decision = Decision("error", reason={"error": type(exc).__name__, "message": str(exc)[:1000]})
            decided.append((version, event, decision))
        await record(conn, decided)
        self._careful = False
