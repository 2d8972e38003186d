"""What an event does at one workflow: conditions, gate, debounce, then start or enroll (G3).

Every way in shares this path: the dispatcher (events from the log), webhook triggers
(public and private), the gatekeeper (after a gate verdict) and the scheduler (when a
debounce window closes). Each step runs on the caller's connection, inside its transaction;
the caller records the decisions it gets (``record``) in that same transaction, so a decision
and its effects commit together. Recording is left to the caller so that the dispatcher can
write a whole batch's decisions in one statement.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime
from typing import Any
from uuid import UUID

from agentflow.core import planner
from agentflow.core.conversations import conversation_of
from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.errors import StepFailure
from agentflow.core.events import Event
from agentflow.core.frozen import frozen
from agentflow.core.records import RunRecord, VersionRecord
from agentflow.core.sources import source_topics
from agentflow.core.triggers import Trigger, conditions_hold, debounce_key, enrollment_key, event_document
from agentflow.nodes.rendering import call_rendering
from agentflow.runtime import metrics
from agentflow.runtime.leases import LocalWorker
from agentflow.store import debounce, decisions, dispatch, gates
from agentflow.store.database import Connection
from agentflow.store.run_starts import Lease

Config = AgentConfig | StructuredConfig
_NO_TRIGGER = Trigger()


@frozen
class Decision:
    """What was decided for (event, workflow), and why.

    Attributes:
        decision: ``started``, ``enrolled``, ``restarted``, ``skipped``, ``debounced``,
            ``gate_pending``, ``gate_declined``, ``not_matched``, ``reuse_rejected``,
            ``key_error`` or ``not_runnable``.
        run_id: the run started, enrolled into or skipped for (None otherwise).
        key: the enrollment key.
        reason: JSON explaining it (the conditions' explanation, the canceled run, ...).
    """

    decision: str
    run_id: UUID | None = None
    key: str | None = None
    reason: Any = None


def trigger_of(config: Config) -> Trigger:
    """The workflow's trigger (the defaults when it declares none)."""
    return config.trigger or _NO_TRIGGER


def topics_of(config: Config) -> list[str]:
    """Topic patterns that start the workflow: its trigger's, plus an agent's sources."""
    topics = list(trigger_of(config).topics)
    if isinstance(config, AgentConfig):
        topics += source_topics(s.type for s in config.sources)
    return topics


async def admit(
    conn: Connection,
    version: VersionRecord,
    config: Config,
    event: Event,
    source: str,
    now: datetime,
    deferred: BatchStarts | None = None,
) -> Decision:
    """Decide what ``event`` does at the workflow of ``version`` and act on it (``record`` it).

    Args:
        conn: a connection inside the caller's transaction.
        version: the workflow version runs start on.
        config: its parsed config.
        event: the stored event.
        source: how it arrived (``event``, ``public``, ``private``); kept on the run.
        now: the time conditions compare dates with.
        deferred: the dispatcher's batch: a run that no other start can conflict with waits
            there to be inserted with others (``BatchStarts.insert``) before the caller records
            the decisions, and a run a restart cancels tells ``run.canceled`` when its
            workspace listens; None: inserted now, told nothing.
    """
    trigger = trigger_of(config)
    matched, why = conditions_hold(trigger, event, now)
    if not matched:
        return Decision("not_matched", reason={"conditions": why})
    doc = event_document(event)
    agent_type = config.type if isinstance(config, AgentConfig) else None
    try:
        key = await call_rendering(enrollment_key, trigger, agent_type, event)
        conversation = (
            await call_rendering(conversation_of, trigger.conversation, doc) if trigger.conversation else None
        )
    except StepFailure as failure:
        return Decision("key_error", reason=failure.info.to_json())
    trigger_doc: dict[str, Any] = {"source": source, "event": doc}
    if conversation is not None:
        trigger_doc["conversation"] = conversation  # the run's conversation column is set from it
    if event.trace_parent is not None:
        trigger_doc["trace_parent"] = event.trace_parent  # the run continues the publisher's trace
    if isinstance(config, AgentConfig) and config.gate is not None and config.gate.enabled:
        await gates.request(
            conn, version.workspace_id, version.workflow_id, version.version, doc,
            {**trigger_doc, "enrollment_key": key, "conditions": why},
        )  # fmt: skip
        return Decision("gate_pending", key=key, reason={"conditions": why})
    return await proceed(conn, version, config, doc, trigger_doc, key, {"conditions": why}, deferred)


async def proceed(
    conn: Connection,
    version: VersionRecord,
    config: Config,
    doc: dict[str, Any],
    trigger_doc: dict[str, Any],
    key: str | None,
    reason: dict[str, Any],
    deferred: BatchStarts | None = None,
) -> Decision:
    """After conditions and the gate: put the event in its debounce window, or start/enroll."""
    trigger = trigger_of(config)
    if trigger.debounce is not None:
        window_key = debounce_key(trigger.debounce, doc["data"], key)
        if window_key is not None:
            max_wait = trigger.debounce.max_wait
            window = await debounce.add(
                conn, version.workspace_id, version.workflow_id, window_key,
                {**doc, "source": trigger_doc["source"], "enrollment_key": key,
                 "conversation": trigger_doc.get("conversation"),
                 "trace_parent": trigger_doc.get("trace_parent")},
                trigger.debounce.seconds,
                None if max_wait is None else max_wait.total_seconds(),
            )  # fmt: skip
            return Decision(
                "debounced",
                key=key,
                reason={**reason, "debounce_key": window_key, "window_events": window["events"],
                        "fire_at": window["fire_at"].isoformat()},
            )  # fmt: skip
        reason = {**reason, "debounce": "the payload has no debounce key; handled at once"}
    return await start(conn, version, config, key, doc["data"], trigger_doc, [doc], reason, deferred)


async def start(
    conn: Connection,
    version: VersionRecord,
    config: Config,
    key: str | None,
    payload: Any,
    trigger_doc: dict[str, Any],
    docs: list[dict[str, Any]],
    reason: dict[str, Any],
    deferred: BatchStarts | None = None,
) -> Decision:
    """Start a run for ``key`` or act on its active run as the trigger's mode says."""
    trigger = trigger_of(config)
    if deferred is not None and deferred.together and (key is None or trigger.mode == "parallel"):
        # Nothing to look up: such a run never conflicts with another (it holds no key).
        metrics.RUNS_STARTED.inc()
        run_id = deferred.add(version, payload, planner.initial_state(config), trigger_doc, docs)
        return Decision("started", run_id, key, reason)
    lease = deferred.reserve() if deferred is not None else None
    held = None
    try:
        outcome = await dispatch.start_or_enroll(
            conn, version.workspace_id, version.workflow_id, version.version, key,
            trigger.enrollment.reuse, trigger.mode, payload, planner.initial_state(config), trigger_doc,
            docs, tell_canceled=deferred is not None and version.workspace_id in deferred.hears_canceled,
            lease=lease,
        )  # fmt: skip
        held = outcome.held
    finally:
        if deferred is not None and lease is not None:
            deferred.keep(held, version)
    if outcome.replaced is not None:
        reason = {**reason, "canceled_run": str(outcome.replaced)}
    if outcome.decision in ("started", "restarted"):
        metrics.RUNS_STARTED.inc()
    return Decision(outcome.decision, outcome.run_id, key, reason)


class BatchStarts:
    """How the dispatcher's batch starts runs: those without an enrollment key together, by
    one statement (``insert``; not when ``together`` is off), and which workspaces hear
    ``run.canceled`` (a run their trigger's ``restart`` mode cancels tells it).

    With ``local`` (eager starts), runs are inserted held by that worker while it has free
    slots, and handed to it by ``settle`` once the caller's transaction committed: they run
    without a claim. Only for a caller whose transaction commits or rolls back as a whole (no
    savepoint that could undo one run's insert and not the others).
    """

    def __init__(
        self,
        *,
        together: bool = True,
        hears_canceled: Collection[UUID] = (),
        local: LocalWorker | None = None,
    ) -> None:
        self.together = together
        self.hears_canceled = hears_canceled
        self._local = local
        self._runs: list[dispatch.NewRun] = []
        self._versions: dict[UUID, VersionRecord] = {}  # of the held runs, by run id
        self._lease: Lease | None = None
        self._promised = 0  # slots reserved and not yet settled
        self._held: list[tuple[RunRecord, VersionRecord]] = []

    def reserve(self) -> Lease | None:
        """A slot of the local worker for the next run, or None (insert it ready)."""
        lease = self._local.reserve() if self._local is not None else None
        if lease is not None:
            self._lease = lease
            self._promised += 1
        return lease

    def keep(self, run: RunRecord | None, version: VersionRecord) -> None:
        """Settle a slot from ``reserve`` at once: ``run`` was inserted held with it (handed
        over by ``settle``), or None: no run took it."""
        if run is None:
            self._promised -= 1
            assert self._local is not None
            self._local.unreserve()
        else:
            self._held.append((run, version))

    def add(
        self,
        version: VersionRecord,
        payload: Any,
        state: dict[str, Any],
        trigger_doc: dict[str, Any],
        docs: list[dict[str, Any]],
    ) -> UUID:
        """Queue a run; return the id it will have."""
        run_id = uuid.uuid4()
        held = self.reserve() is not None
        if held:
            self._versions[run_id] = version
        self._runs.append(
            dispatch.NewRun(
                version.workspace_id,
                run_id,
                version.workflow_id,
                version.version,
                payload,
                state,
                trigger_doc,
                docs,
                held,
            )
        )
        return run_id

    async def insert(self, conn: Connection) -> None:
        """Insert the queued runs (in the caller's transaction) and forget them."""
        runs, self._runs = self._runs, []
        held = await dispatch.start_many(conn, runs, self._lease)
        self._held += [(run, self._versions.pop(run.id)) for run in held]

    def settle(self, committed: bool) -> None:
        """After the caller's transaction: hand the held runs to the local worker when it
        committed; give every reserved slot back when it did not."""
        if self._local is None:
            return
        taken = self._held if committed else []
        for run, version in taken:
            self._local.take(run, version)
        for _ in range(self._promised - len(taken)):
            self._local.unreserve()
        self._promised, self._held = 0, []


Entry = tuple[VersionRecord, Event, Decision] | decisions.Misses
"""A decision for (event, workflow), or an event's misses (workflows whose conditions did not
hold, not explained)."""


async def record(conn: Connection, entries: list[Entry]) -> None:
    """Record decisions and misses (one statement each), in the order of ``entries``."""
    await decisions.record_all(
        conn,
        [
            e
            if isinstance(e, decisions.Misses)
            else decisions.DecisionRow(
                e[0].workspace_id,
                e[0].workflow_id,
                e[1].topic,
                e[1].message_id,
                e[2].decision,
                e[2].key,
                e[2].run_id,
                e[2].reason,
            )
            for e in entries
        ],
    )
