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
from typing import NamedTuple
from uuid import UUID

from agentflow.core.condition_index import ConditionIndex
from agentflow.core.condition_predicates import Predicate
from agentflow.core.events import Event
from agentflow.core.lifecycle import RUN_CANCELED
from agentflow.core.records import VersionRecord
from agentflow.core.sources import TopicPatterns
from agentflow.core.triggers import event_document
from agentflow.runtime import companion_spans
from agentflow.runtime.admission import (
    BatchStarts,
    Config,
    Decision,
    Entry,
    admit,
    record,
    topics_of,
    trigger_of,
)
from agentflow.runtime.configs import ConfigCache
from agentflow.runtime.consumer import EventConsumer
from agentflow.runtime.event_waits import answer_waits
from agentflow.runtime.leases import LocalWorker
from agentflow.store import decisions, dispatch
from agentflow.store.database import TRANSACTION_CONFLICTS, Connection, Database, unavailable

logger = logging.getLogger(__name__)

CONSUMER_NAME = "agentflow.dispatcher"


class Dispatcher:
    """Turns events into runs; use ``consumer()`` to run it.

    Args:
        db: the database.
        local: the worker this dispatcher runs beside, when starts are eager
            (``Settings.eager_start``): the runs a batch starts are inserted held by it while it
            has free slots, and run there once the batch committed, without a claim.
    """

    def __init__(self, db: Database, local: LocalWorker | None = None) -> None:
        self.db = db
        self._local = local
        self._starts: BatchStarts | None = None  # the batch in flight's
        self._configs = ConfigCache(db.pool)
        # The listening versions of the last batch: their configs are not read again.
        self._versions: dict[tuple[UUID, UUID, int], VersionRecord] = {}
        # Each listening version's topic patterns, compiled once (a version never changes),
        # and by workspace as of the last batch, for the lifecycle topics it hears.
        self._matchers: dict[tuple[UUID, UUID, int], TopicPatterns] = {}
        self._hearers: dict[UUID, list[TopicPatterns]] = {}
        # After a batch failed, the next one is decided pair by pair in savepoints, so one
        # poison (event, workflow) pair is recorded as an error instead of blocking the log.
        self._careful = False

    def consumer(self, *, batch_size: int = 500, poll_interval: float = 1.0) -> EventConsumer:
        """The event consumer that feeds this dispatcher.

        A batch is one transaction: a larger one spreads its fixed statements over more events
        (E3, 100 workflows: 200 -> 500 took ~1,000 to ~1,400 events/s) but delays events that
        arrive meanwhile until it commits (by about 0.4 s at 500 events x 100 workflows). It
        holds only the events that are there: one event at a time is dispatched at once.
        """
        return EventConsumer(
            self.db, CONSUMER_NAME, self.handle, batch_size=batch_size, poll_interval=poll_interval,
            settle=self.settle,
        )  # fmt: skip

    def settle(self, committed: bool) -> None:
        """After a batch's transaction: its held runs go to the worker if it committed."""
        starts, self._starts = self._starts, None
        if starts is not None:
            starts.settle(committed)

    async def handle(self, conn: Connection, batch: list[Event]) -> None:
        """Decide every (event, listening workflow) pair of the batch; record the decisions in
        one statement at the end.

        Raises:
            Exception: whatever failed (the consumer rolls the batch back and delivers it
                again; that delivery is decided pair by pair, see ``_careful``).
        """
        with companion_spans.dispatch_span(batch) as span:
            entries = await self._decide(conn, batch)
            if span is not None:
                decided = [e[2].decision for e in entries if not isinstance(e, decisions.Misses)]
                missed = sum(len(e.workflows) for e in entries if isinstance(e, decisions.Misses))
                companion_spans.count_decisions(span, decided + ["not_matched"] * missed)

    async def _decide(self, conn: Connection, batch: list[Event]) -> list[Entry]:
        careful, self._careful = self._careful, True
        await self._answer_waits(conn, batch, careful)
        by_topic = await self._listeners(conn, batch)
        if not any(audience.listeners for audience in by_topic.values()):
            self._careful = False
            return []
        done = await decisions.decided(conn, [(e.workspace_id, e.topic, e.message_id) for e in batch])
        now = datetime.now(UTC)
        entries: list[Entry] = []
        # Runs that cannot conflict are inserted together below; the careful pass inserts
        # each in its own savepoint instead.
        # The careful pass decides pairs in savepoints: it starts nothing eagerly.
        deferred = BatchStarts(
            together=not careful,
            hears_canceled=self._hearing(RUN_CANCELED),
            local=None if careful else self._local,
        )
        self._starts = deferred
        for event in batch:
            listeners, conditions = by_topic[(event.workspace_id, event.topic)]
            document = event_document(event) if listeners else None
            # Only the conditions that can hold are tested; the others fail (ConditionIndex).
            possible = conditions.candidates(document) if listeners else set()
            missed: list[tuple[UUID, int]] | None = None  # the event's entry, from its first miss
            for position, (version, config, predicate) in enumerate(listeners):
                if done and (event.workspace_id, version.workflow_id, event.topic, event.message_id) in done:
                    continue
                try:
                    matched = position in possible and (predicate is None or predicate(document, now))
                except Exception as exc:  # a condition the parser let through but cannot evaluate
                    logger.exception("conditions failed on %s %s", event.topic, event.message_id)
                    entries.append((version, event, _error(exc)))
                    continue
                if matched:
                    entries.append(
                        (version, event, await self._admit(conn, version, config, event, now, deferred))
                    )
                elif missed is not None:  # explained when read (eventlog), not here: most pairs end so
                    missed.append((version.workflow_id, version.version))
                else:
                    missed = [(version.workflow_id, version.version)]
                    misses = decisions.Misses(event.workspace_id, event.topic, event.message_id, missed)
                    entries.append(misses)
        await deferred.insert(conn)
        await record(conn, entries)
        self._careful = False
        return entries

    async def _answer_waits(self, conn: Connection, batch: list[Event], careful: bool) -> None:
        """Answer the runs that wait for these events (``runtime.event_waits``), first."""
        if not careful:
            await answer_waits(conn, batch, datetime.now(UTC))
            return
        try:
            async with conn.transaction():  # a savepoint: a failure here blocks no workflow
                await answer_waits(conn, batch, datetime.now(UTC))
        except Exception as exc:
            if _transient(exc):  # the consumer delivers the batch again: no wait goes unanswered
                raise
            logger.exception("answering event waits of a batch failed")

    async def _listeners(self, conn: Connection, batch: list[Event]) -> dict[tuple[UUID, str], _Audience]:
        """The listening workflows of each (workspace, topic) of the batch: a topic's filters
        are matched once per batch, not once per event."""
        versions = await dispatch.listening_workflows(conn, self._versions)
        self._versions = {(v.workspace_id, v.workflow_id, v.version): v for v in versions}
        listening = []
        matchers: dict[tuple[UUID, UUID, int], TopicPatterns] = {}
        self._hearers = {}
        for key, version in self._versions.items():
            config = self._configs.parse(version)
            matcher = self._matchers.get(key) or TopicPatterns(topics_of(config))
            matchers[key] = matcher
            listening.append((version, config, matcher))
            self._hearers.setdefault(version.workspace_id, []).append(matcher)
        self._matchers = matchers
        by_topic: dict[tuple[UUID, str], _Audience] = {}
        for event in batch:
            at = (event.workspace_id, event.topic)
            if at not in by_topic:
                triggers = [
                    (version, config, trigger_of(config))
                    for version, config, matcher in listening
                    if version.workspace_id == event.workspace_id and matcher.matches(event.topic)
                ]
                listeners = [_Listener(version, config, t.predicate()) for version, config, t in triggers]
                index = ConditionIndex([t.condition() for _, _, t in triggers])
                by_topic[at] = _Audience(listeners, index)
        return by_topic

    def _hearing(self, topic: str) -> frozenset[UUID]:
        """The workspaces of the batch with a workflow that listens to lifecycle ``topic``."""
        if not self.db.settings.lifecycle_events:
            return frozenset()
        hearers = self._hearers.items()
        return frozenset(ws for ws, matchers in hearers if any(m.matches(topic) for m in matchers))

    async def _admit(
        self,
        conn: Connection,
        version: VersionRecord,
        config: Config,
        event: Event,
        now: datetime,
        deferred: BatchStarts,
    ) -> Decision:
        """Admit a pair whose conditions hold; the careful pass in a savepoint of its own."""
        if deferred.together:
            return await admit(conn, version, config, event, "event", now, deferred)
        try:
            async with conn.transaction():  # a savepoint
                return await admit(conn, version, config, event, "event", now, deferred)
        except Exception as exc:
            if _transient(exc):  # not the pair's fault: the consumer delivers the batch again
                raise
            logger.exception("dispatch of %s %s failed", event.topic, event.message_id)
            return _error(exc)


class _Listener(NamedTuple):
    version: VersionRecord
    config: Config
    predicate: Predicate | None


class _Audience(NamedTuple):
    """The workflows listening to one (workspace, topic), with their conditions indexed."""

    listeners: list[_Listener]
    conditions: ConditionIndex


def _transient(exc: Exception) -> bool:
    """An outage, or a deadlock with another writer (a worker's group commit locks several
    runs; so does this batch): the batch is tried again, nothing is recorded as an error."""
    return unavailable(exc) or isinstance(exc, TRANSACTION_CONFLICTS)


def _error(exc: Exception) -> Decision:
    return Decision("error", reason={"error": type(exc).__name__, "message": str(exc)[:1000]})
