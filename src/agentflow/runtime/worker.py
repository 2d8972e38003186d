"""The worker: claims due runs, drives each through its steps, keeps its leases.

One worker process runs up to ``concurrency`` runs at once on one event loop. It sleeps
until the earliest due run (read from the index), a NOTIFY, or the poll interval,
whichever comes first; there are no in-memory timers, so waiting runs cost it nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from uuid import UUID

from agentflow.agent.env import AgentEnv
from agentflow.agent.gate import ModelGate
from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.inbox import EMPTY
from agentflow.core.lifecycle import RUN_CANCELED, RUN_FAILED
from agentflow.core.records import RunRecord, VersionRecord
from agentflow.core.statuses import RunStatus
from agentflow.core.tools import ToolRegistry, default_registry
from agentflow.llm.base import ModelProvider
from agentflow.nodes.threads import ToolThreads
from agentflow.runtime import agent_step, begins, cursor_reads, log_context, metrics, step, tracing
from agentflow.runtime.agent_setup import build_agent_env, build_node_env
from agentflow.runtime.branches import BranchDriver, in_branches
from agentflow.runtime.companions import Companion, keep_running, worker_companions
from agentflow.runtime.configs import ConfigCache
from agentflow.runtime.failpoints import failpoint
from agentflow.runtime.gatekeeper import EventGate
from agentflow.runtime.leases import Held, Promises, keep_leases, release_after_outage, release_quietly
from agentflow.runtime.lifecycle_listeners import LifecycleListeners
from agentflow.runtime.sequence import drive_in_sequence
from agentflow.runtime.step_writer import StepWriter
from agentflow.settings import Settings
from agentflow.store import database, inbox, reads, runs, steps_ahead
from agentflow.store.checkpoints import PriorStep
from agentflow.store.commit_groups import CommitGroup
from agentflow.store.database import TRANSACTION_CONFLICTS, UNAVAILABLE_ERRORS, Database, unavailable
from agentflow.store.run_starts import Lease

logger = logging.getLogger(__name__)


class Worker:
    """Executes runs until stopped.

    Args:
        db: the database.
        settings: lease TTL, poll interval, concurrency, rescue limit.
        tools: the tool registry (default: every ``@agentflow.tool``).
        concurrency: overrides ``settings.worker_concurrency``.
        name: the lease owner name; unique per worker (default host:pid:random).
        dispatch: also run the dispatcher (events -> runs), the scheduler (cron and debounce
            windows -> runs) and the gatekeeper (gated events -> runs); any number of workers
            may, each batch, due schedule, window or gate request is handled by one of them.
            With ``settings.eager_start``, the runs its dispatcher starts are inserted held by
            this worker while it has free slots, and run here without a claim.
        gate: the event gate the gatekeeper asks (default: the workflow's model, see
            ``agentflow.agent.gate.ModelGate``).
        model: answer every model call of agent runs and the gate with this provider (tests,
            the demo); by default each workflow's ``model`` decides.
        sealing_key: returns the key credentials are sealed with (default: the settings', see
            ``settings.sealing_key``).
    """

    def __init__(
        self,
        db: Database,
        settings: Settings,
        *,
        tools: ToolRegistry | None = None,
        concurrency: int | None = None,
        name: str | None = None,
        dispatch: bool = True,
        gate: EventGate | None = None,
        model: ModelProvider | None = None,
        sealing_key: Callable[[], bytes] | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.concurrency = concurrency or settings.worker_concurrency
        # Fixed for the worker's life: its leases, checkpoints and companions all carry it.
        self._name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._tools = tools or default_registry
        self._configs = ConfigCache(db.pool)
        # Begins and checkpoints of the runs driven here share commits (group commit); a
        # lone run's go at once.
        self._commits = CommitGroup(db.pool, solo=self._holds_one)
        self._listeners = LifecycleListeners(db, self._configs)
        self.threads = ToolThreads()
        self.agents: AgentEnv = build_agent_env(db, settings, self._tools, self.threads, model=model)
        self._env = build_node_env(
            db, settings, self.agents, self._tools, self.threads, self._configs, sealing_key=sealing_key
        )
        gate = gate or ModelGate(self.agents.model, self.agents.prices)
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        # Claims by run id. A run can be re-claimed by this same worker after its lease
        # lapsed (a stalled heartbeat): the newer claim replaces the older one here, and the
        # older driver's cleanup must not touch it, hence identity checks on Held.
        self._held: dict[UUID, Held] = {}
        self._drivers: set[asyncio.Task[None]] = set()
        # Slots promised to runs this process is starting (eager starts, ``reserve``).
        self._promised = Promises()
        self._running = False
        self._listening = asyncio.Event()
        self._planned_wake = 0.0
        self._writer = StepWriter(
            db, settings, self._commits, self._listeners, self.name, plan_wake=self._plan_wake
        )
        # Loops that run beside the claim loop: events -> runs, cron -> runs, the outbox ...
        self._companions: list[Companion] = (
            worker_companions(
                db,
                settings,
                owner=self.name,
                gate=gate,
                agents=self.agents,
                configs=self._configs,
                listeners=self._listeners,
                local=self if settings.eager_start else None,
            )
            if dispatch
            else []
        )

    @property
    def name(self) -> str:
        """The lease owner name (``name`` given, else host:pid:random)."""
        return self._name

    def stop(self) -> None:
        """Stop claiming; running runs finish their current step and are released."""
        self._stopping.set()
        self._wake.set()

    async def wait_until_running(self) -> None:
        """Return once ``run()`` is listening (and takes eager starts)."""
        await self._listening.wait()

    def wake(self) -> None:
        """Look for due runs now (called on NOTIFY)."""
        self._wake.set()

    def reserve(self) -> Lease | None:
        """Promise a slot to a run this process is about to start (an eager start).

        Returns the lease to insert the run with, or None when the worker is not running, is
        stopping or has no free slot. Each lease is settled by ``take`` (the run was inserted
        held) or ``unreserve``.
        """
        if not self._running or self._stopping.is_set():
            return None
        if len(self._held) + self._promised.open >= self.concurrency:
            return None
        self._promised.make()
        return Lease(self.name, self.settings.lease_ttl)

    def take(self, run: RunRecord, version: VersionRecord) -> None:
        """Drive ``run`` of ``version``, inserted held and begun under a lease from ``reserve``."""
        if self._env.code is None and self._configs.needs_code(version):
            # Code steps are off here: hand it back for a worker that runs them (rare: only a
            # version published while they were on has such nodes).
            task = asyncio.create_task(release_quietly(self.db.pool, run, run.fencing_token, self.name))
            self._drivers.add(task)
            task.add_done_callback(self._drivers.discard)
        else:
            self._configs.parse(version)  # what the start parsed: the step loads nothing first
            self._accept(runs.Claimed(run, rescued=False), time.monotonic(), begun=True)
        self._promised.end()

    def unreserve(self) -> None:
        """Give back a slot from ``reserve`` that no run took."""
        self._promised.end()
        self._wake.set()  # the slot is free for a claim

    async def run(self) -> None:
        """Work until ``stop()``; then wait for in-flight steps and release their runs."""
        listener = await self.db.listen(lambda _payload: self._wake.set())
        heartbeat = asyncio.create_task(
            keep_leases(self.db.pool, self.name, self._held, self.settings.lease_ttl),
            name="agentflow-heartbeat",
        )
        companions = [
            asyncio.create_task(keep_running(c, self._stopping), name=f"agentflow-{type(c).__name__}")
            for c in self._companions
        ]
        self._running = True
        self._listening.set()
        try:
            await self._claim_loop()
        finally:
            for companion in self._companions:
                companion.stop()
            await asyncio.gather(*companions, return_exceptions=True)
            await self._promised.all_ended()  # starts in flight hand their runs over, or not
            self._running = False
            if self._drivers:
                await asyncio.gather(*self._drivers, return_exceptions=True)
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            await listener.close()
            await self.agents.aclose()

    async def _claim_loop(self) -> None:
        backoff = 0.0
        while not self._stopping.is_set():
            self._wake.clear()
            free = self.concurrency - len(self._held) - self._promised.open
            claimed: list[runs.Claimed] = []
            try:
                if free > 0:
                    tell = self.settings.lifecycle_events
                    claimed_at = time.monotonic()
                    claimed = await runs.claim(
                        self.db.pool,
                        self.name,
                        free,
                        self.settings.lease_ttl,
                        self.settings.max_rescues,
                        # A run the claim ends (worker_lost, a cancel) tells it as a checkpoint would.
                        tell_failed=await self._listeners.audience(RUN_FAILED) if tell else None,
                        tell_canceled=await self._listeners.audience(RUN_CANCELED) if tell else None,
                        code=self._env.code is not None,
                    )
                    failpoint("after_claim")
                    for item in claimed:
                        self._accept(item, claimed_at)
                    if len(claimed) == free:
                        continue
                    if claimed:  # their begins go out before this loop looks for the next due run:
                        await asyncio.sleep(0)  # a turn for each run to load and send its begin,
                        await asyncio.sleep(0)  # one for the begins sent as the steps start
                delay = await self._sleep_for(free > 0 and not claimed)
                backoff = 0.0
            except (*UNAVAILABLE_ERRORS, *TRANSACTION_CONFLICTS) as exc:
                if not unavailable(exc) and not isinstance(exc, TRANSACTION_CONFLICTS):
                    raise
                backoff = min(max(backoff * 2, 0.1), 5 * self.settings.poll_interval)
                logger.warning("claim failed (%s); retrying in %.1fs", database.describe(exc), backoff)
                delay = backoff
            self._planned_wake = time.monotonic() + delay
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    async def _sleep_for(self, idle: bool) -> float:
        delay = self.settings.poll_interval
        if len(self._held) < self.concurrency:
            due = await runs.seconds_to_next_due(self.db.pool, code=self._env.code is not None)
            if due is not None:
                # A run due later: sleep exactly until then. One overdue but not claimable
                # (locked by another worker): look again soon, without spinning.
                delay = min(delay, due if due > 0 else (0.01 if idle else 0.0))
        return delay

    def _accept(self, item: runs.Claimed, claimed_at: float, *, begun: bool = False) -> None:
        (metrics.EAGER_STARTS if begun else metrics.CLAIMS).inc()
        if item.rescued:
            metrics.RESCUES.inc()
        run = item.run
        if run.status != RunStatus.IN_PROGRESS:
            metrics.RUNS_TERMINAL.labels(run.status.value).inc()
            tracing.end_run(run, run.status.value, reason=run.status_reason)
            logger.warning("run %s ended at claim: %s", run.id, run.status_reason)
            return
        older = self._held.get(run.id)
        if older is not None:
            older.cancel_steps()  # our own lapsed claim: its result would be fenced off anyway
        held = Held(run.workspace_id, run.id, run.fencing_token)
        self._held[run.id] = held
        held.task = asyncio.create_task(
            self._drive(item, held, claimed_at, begun), name=f"agentflow-run-{run.id}"
        )
        self._drivers.add(held.task)
        held.task.add_done_callback(functools.partial(self._forget, held))

    def _holds_one(self) -> bool:
        """Whether this worker drives one run at most (no other run could share its commits)."""
        return len(self._held) + self._promised.open <= 1

    def _plan_wake(self, due: float) -> None:
        """Look for due runs at monotonic time ``due`` at the latest (a run waits until then)."""
        if due < self._planned_wake:
            self._planned_wake = due
            self._wake.set()

    def _forget(self, held: Held, task: asyncio.Task[None]) -> None:
        self._drivers.discard(task)
        if self._held.get(held.run_id) is held:
            del self._held[held.run_id]
        self._wake.set()  # a slot is free

    async def _drive(self, claimed: runs.Claimed, held: Held, claimed_at: float, begun: bool) -> None:
        run = claimed.run
        token = run.fencing_token
        log_context.bind_run(run)
        in_flight: begins.InFlight | None = None
        try:
            config = await self._configs.for_run(run)
            agent = isinstance(config, AgentConfig)
            outputs: dict[str, Any] = {}
            behind: int | None = None  # the counter the run's row holds when it lags its steps
            # Only a run driven in sequence writes steps ahead of its row, and only while in
            # progress: a run that waited or is new was caught up when it stopped running.
            if claimed.was_running and not agent and not in_branches(config):
                caught = await steps_ahead.caught_up(self.db.pool, run)
                behind, run = (None if caught is run else run.step_seq), caught
            if run.step_seq and not agent:
                outputs = await reads.step_outputs(self.db.pool, run.workspace_id, run.id)
            # The inbox is read here and after a checkpoint that counts new deliveries, never
            # before every step: a step costs its checkpoint statement and nothing more.
            pending = await inbox.load(self.db.pool, run.workspace_id, run.id) if claimed.inbox_seq else EMPTY
            cursor = step.Cursor.of(run, outputs, pending)
            # Loaded: from here a lost worker cuts the step off, and costs the run a rescue (an
            # eager start's insert began its run: this process had all the run needs then).
            if not begun:
                young = begins.is_young(claimed_at, self.settings.lease_ttl)
                began, in_flight = await begins.begin(self._commits, config, run, self.name, cursor, young)
                if began is None:
                    logger.info("run %s: lease lost before its step began", run.id)
                    return
                cursor = began
            # A row current at the claim with no rescue counts to reset: no full write is due yet.
            full_at = None if claimed.counts_rescues or behind is not None else claimed_at
            if await self._drive_steps(config, run, held, cursor, behind, in_flight, full_at):
                await release_quietly(self.db.pool, run, token, self.name)
        except asyncio.CancelledError:
            logger.info("run %s: lease lost during its step; result discarded", run.id)
        except Exception as exc:
            if unavailable(exc) or isinstance(exc, TRANSACTION_CONFLICTS):
                # The checkpoint may or may not have committed (an outage), or PostgreSQL rolled
                # it back (a deadlock with another writer, e.g. an enrollment); either way the
                # fence keeps the run consistent. Hand it back so a worker continues from what
                # is stored.
                logger.warning("run %s: database error (%s); releasing", run.id, database.describe(exc))
                await release_after_outage(self.db.pool, run, token, self.name, self.settings.lease_ttl)
            else:
                # Not released on purpose: the lease expires and the rescue limit bounds a
                # run that fails this way every time (it ends failed with worker_lost).
                logger.exception("run %s: unexpected worker error; its lease will expire", run.id)
        finally:
            if in_flight is not None:
                await in_flight.settle()

    async def _drive_steps(
        self,
        config: AgentConfig | StructuredConfig,
        run: RunRecord,
        held: Held,
        cursor: step.Cursor,
        behind: int | None = None,
        in_flight: begins.InFlight | None = None,
        full_at: float | None = None,
    ) -> bool:
        """Run the held run's steps until it leaves this worker: several nodes at a time when
        its graph fans out (``runtime.branches``), else one after another (``runtime.sequence``).
        True when the worker stops with the run still ours and idle (the caller releases it)."""
        token = held.token

        async def checkpoint(
            outcome: step.StepOutcome, prior: Sequence[PriorStep]
        ) -> runs.Checkpointed | None:
            ready = outcome if in_flight is None else await in_flight.ready(outcome)  # a begin in flight
            return None if ready is None else await self._writer.checkpoint(run, token, ready, config, prior)

        load_loops = functools.partial(cursor_reads.count_loops, self.db.pool, run)
        refresh = functools.partial(cursor_reads.refresh, self.db.pool, run)
        if isinstance(config, StructuredConfig) and in_branches(config):
            driver = BranchDriver(
                config, run, self._env, token, checkpoint=checkpoint, load_loops=load_loops,
                refresh=refresh, stopping=self._stopping, steps=held.steps,
            )  # fmt: skip
            return await driver.drive(cursor)

        def execute(at: step.Cursor) -> Awaitable[step.StepOutcome]:
            if isinstance(config, AgentConfig):
                return agent_step.execute(config, run, at, self.agents, token)
            return step.execute(config, run, at, self._env, token)

        async def write_ahead(
            outcome: step.StepOutcome, counter: int
        ) -> tuple[runs.Checkpointed | None, bool]:
            ready = outcome if in_flight is None else await in_flight.ready(outcome)
            return (
                await self._writer.write_ahead(run, token, ready, config, counter) if ready else (None, False)
            )

        return await drive_in_sequence(
            config, cursor, execute=execute, checkpoint=checkpoint, load_loops=load_loops, refresh=refresh,
            stopping=self._stopping, steps=held.steps, write_ahead=write_ahead, behind=behind,
            full_at=full_at,
        )  # fmt: skip
