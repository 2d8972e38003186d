"""The scheduler: starts runs of workflows that declare a cron ``schedule``, closes
debounce windows whose time has come, and writes task reminders (the same time loop).

Each tick claims due schedule rows (``FOR UPDATE SKIP LOCKED``, so any number of workers may
run it), plans what to start with the schedule's catch-up policy on the database clock, and
inserts those runs and the new cursor in one transaction: a fire time is started once. A
disabled or draft workflow's fire times pass without runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import datetime

from agentflow.core import planner
from agentflow.core.schedules import next_fire, plan_catch_up
from agentflow.runtime import companion_spans, metrics, tracing
from agentflow.runtime.configs import ConfigCache
from agentflow.runtime.debouncer import close_windows
from agentflow.runtime.lifecycle_listeners import LifecycleListeners
from agentflow.runtime.reminders import ReminderScanner
from agentflow.store import (
    audit_log,
    debounce,
    decisions,
    events,
    memory,
    requests,
    run_deltas,
    run_retention,
    schedules,
)
from agentflow.store.database import UNAVAILABLE_ERRORS, Connection, Database, unavailable

logger = logging.getLogger(__name__)

PRUNE_EVERY = 3600.0
"""Seconds between two retention passes of one scheduler."""


class Scheduler:
    """Fires cron schedules, closes debounce windows, applies retention; ``run()`` until ``stop()``.

    Args:
        db: the database.
        poll_interval: the longest it sleeps between ticks.
        batch_size: schedules and windows handled per transaction.
        retention: prune events (every consumer has read) and dispatch decisions older than
            this many seconds, at start and then every ``PRUNE_EVERY`` seconds; None: never.
            Agent memory past the retention its workflow declares, and streamed text older than
            a day, are deleted at the same pace whatever this is.
        run_retention_days: delete finished runs this many days old at the same pace, in
            workspaces that set no retention of their own (0: keep them).
        audit_retention_days: delete audit log entries this many days old at the same pace
            (0: keep them).
    """

    def __init__(
        self,
        db: Database,
        *,
        poll_interval: float = 1.0,
        batch_size: int = 50,
        retention: float | None = None,
        run_retention_days: int = 0,
        audit_retention_days: int = 0,
        listeners: LifecycleListeners | None = None,
    ) -> None:
        self.db = db
        self.poll_interval = poll_interval
        self.batch_size = batch_size
        self.retention = retention
        self.run_retention_days = run_retention_days
        self.audit_retention_days = audit_retention_days
        self._stopping = asyncio.Event()
        self._configs = ConfigCache(db.pool)
        self._listeners = listeners or LifecycleListeners(db, self._configs)
        self._next_prune = 0.0
        self.reminders = ReminderScanner(db, every=poll_interval)

    def stop(self) -> None:
        """Return from ``run`` after the current tick."""
        self._stopping.set()

    async def tick(self) -> int:
        """Handle every due schedule once; return how many runs were started."""
        async with self.db.pool.acquire() as conn, conn.transaction():
            now, due = await schedules.claim_due(conn, self.batch_size)
            with companion_spans.schedule_span(len(due)) as span:
                started = await self._fire(conn, now, due)
                if span is not None:
                    span.set_attribute("agentflow.schedules.runs_started", started)
        async with self.db.pool.acquire() as conn, conn.transaction():
            await close_windows(conn, self._configs, self.batch_size, self._listeners)
        async with self.db.pool.acquire() as conn:
            # Requests to people past their time: expired, and their runs told (one statement).
            await requests.expire_due(conn, self.batch_size)
        await self.reminders.tick()  # task reminders, at most once per poll interval
        return started

    async def _fire(self, conn: Connection, now: datetime, due: list[schedules.DueSchedule]) -> int:
        """Start the runs of the due schedules (their fires since the last, caught up);
        return how many."""
        started = 0
        for row in due:
            config = self._configs.parse_document(row.workspace_id, row.workflow_id, row.version, row.config)
            if config.schedule is None:  # published without a schedule since: nothing to do
                await schedules.advance(conn, row.workspace_id, row.workflow_id, row.last_fire, None)
                continue
            plan = plan_catch_up(config.schedule, row.last_fire, now)
            if row.active:
                for fire in plan.fires:
                    await schedules.start_scheduled(
                        conn,
                        row.workspace_id,
                        row.workflow_id,
                        row.version,
                        fire,
                        planner.initial_state(config),
                        trace_parent=tracing.current_traceparent(),  # the run is the pass's child
                    )
                    started += 1
                    metrics.RUNS_STARTED.inc()
            following = next_fire(config.schedule, now)
            await schedules.advance(conn, row.workspace_id, row.workflow_id, plan.cursor, following)
        return started

    async def apply_retention(self) -> dict[str, int]:
        """One retention pass over every kind of history; return how many rows of each went."""
        with companion_spans.retention_span() as span:
            events_deleted, decisions_deleted = await self.prune()
            deleted = {
                "events": events_deleted,
                "decisions": decisions_deleted,
                "memory_messages": await self.expire_memory(),
                "streamed_deltas": await self.expire_deltas(),
                "runs": await self.prune_runs(),
                "audit_entries": await self.prune_audit(),
            }
            companion_spans.count_deleted(span, deleted)
        return deleted

    async def expire_memory(self) -> int:
        """Delete agent memory past its retention now; return how many messages went."""
        deleted = await memory.expire(self.db.pool)
        if deleted:
            logger.info("retention: deleted %d expired memory message(s)", deleted)
        return deleted

    async def expire_deltas(self) -> int:
        """Delete streamed text older than a day (steps keep their results); return how many."""
        deleted = await run_deltas.prune(self.db.pool)
        if deleted:
            logger.info("retention: deleted %d streamed piece(s) of text", deleted)
        return deleted

    async def prune_runs(self) -> int:
        """Delete finished runs past their workspace's retention now; return how many went."""
        pruned = await run_retention.prune_runs(self.db.pool, self.run_retention_days)
        for workspace_id, count in pruned.runs.items():
            logger.info("retention: deleted %d finished run(s) of workspace %s", count, workspace_id)
        return pruned.total

    async def prune_audit(self) -> int:
        """Delete audit log entries past ``audit_retention_days`` now; return how many went."""
        if not self.audit_retention_days:
            return 0
        deleted = await audit_log.prune(self.db.pool, self.audit_retention_days)
        if deleted:
            logger.info("retention: deleted %d audit log entr(ies)", deleted)
        return deleted

    async def prune(self) -> tuple[int, int]:
        """Apply retention now: return (events, decisions) deleted."""
        if self.retention is None:
            return 0, 0
        pruned = await events.prune(self.db.pool, self.retention)
        async with self.db.pool.acquire() as conn:
            pruned_decisions = await decisions.prune_decisions(conn, self.retention)
        if pruned or pruned_decisions:
            logger.info("retention: deleted %d event(s) and %d decision(s)", pruned, pruned_decisions)
        return pruned, pruned_decisions

    async def run(self) -> None:
        """Tick whenever a schedule is due (or the poll interval passes)."""
        while not self._stopping.is_set():
            delay = self.poll_interval
            try:
                await self.tick()
                if time.monotonic() >= self._next_prune:
                    await self.apply_retention()
                    self._next_prune = time.monotonic() + PRUNE_EVERY
                async with self.db.pool.acquire() as conn:
                    dues = [await schedules.seconds_to_next(conn), await debounce.seconds_to_next(conn)]
                for due in dues:
                    if due is not None:
                        delay = min(delay, max(due, 0.0))
            except UNAVAILABLE_ERRORS as exc:
                if not unavailable(exc):
                    raise
                # Down or restarting ("the database system is starting up" too): wait a
                # poll interval and tick again; each transaction of a tick is whole or absent.
                logger.warning("scheduler: %s; retrying", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
