"""Independent checks the fault tests share: count reconciliation and lease monitoring.

Nothing here trusts the engine's own bookkeeping of what it did: runs, steps and tasks are
counted with plain SQL, external effects with the recording server.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from tests.support.processes import Death, Supervisor
from tests.support.recording_server import RecordingServer

ENDED = frozenset({"completed", "failed", "canceled"})


async def all_settled(pool: asyncpg.Pool, workflow_id: UUID, topic: str) -> bool:
    """Every stored event of ``topic`` decided at the workflow, and none of its runs active."""
    row = await pool.fetchrow(
        "SELECT (SELECT count(*) FROM events WHERE topic = $2) AS events,"
        " (SELECT count(*) FROM dispatch_decisions WHERE workflow_id = $1 AND event_topic = $2) AS decided,"
        " (SELECT count(*) FROM runs WHERE workflow_id = $1 AND active) AS active",
        workflow_id,
        topic,
    )
    assert row is not None
    return bool(row["decided"] >= row["events"] and row["active"] == 0)


async def progress_mark(pool: asyncpg.Pool, workflow_id: UUID, topic: str) -> tuple[int, ...]:
    """What changes while the engine gets on with a workflow's events and runs: decisions
    made, step rows written, runs ended. Equal marks some seconds apart mean nothing moved."""
    row = await pool.fetchrow(
        "SELECT (SELECT count(*) FROM dispatch_decisions WHERE workflow_id = $1 AND event_topic = $2) AS decided,"
        " (SELECT count(*) FROM run_steps s JOIN runs r ON r.workspace_id = s.workspace_id AND r.id = s.run_id"
        "  WHERE r.workflow_id = $1) AS steps,"
        " (SELECT count(*) FROM runs WHERE workflow_id = $1 AND NOT active) AS ended",
        workflow_id,
        topic,
    )
    assert row is not None
    return (row["decided"], row["steps"], row["ended"])


async def reconcile(
    pool: asyncpg.Pool,
    recorder: RecordingServer,
    run_ids: list[UUID],
    *,
    steps_per_run: int,
    keyed_seq: int,
) -> dict[str, Any]:
    """Count what happened to ``run_ids``; return a verdict of lost / duplicated / unexpected.

    Each run is expected to have completed; to have exactly one ``completed`` step row for
    each seq ``0..steps_per_run-1`` and none beyond; exactly one task row; exactly one
    applied keyed effect on the recorder's ``/keyed`` path, whose every raw call carried
    the key ``run_id:keyed_seq``; and at least one raw call to ``/unkeyed``.
    """
    ids = set(run_ids)
    runs = await pool.fetch("SELECT id, status, status_reason FROM runs WHERE id = any($1::uuid[])", run_ids)
    status = {r["id"]: r["status"] for r in runs}
    steps = await pool.fetch(
        "SELECT run_id, seq, count(*) AS n FROM run_steps WHERE run_id = any($1::uuid[])"
        " AND status = 'completed' GROUP BY run_id, seq",
        run_ids,
    )
    seqs: dict[UUID, dict[int, int]] = defaultdict(dict)
    for row in steps:
        seqs[row["run_id"]][row["seq"]] = row["n"]
    task_rows = await pool.fetch(
        "SELECT run_id, count(*) AS n FROM tasks WHERE run_id = any($1::uuid[]) GROUP BY run_id", run_ids
    )
    tasks = {r["run_id"]: r["n"] for r in task_rows}
    failed_attempts = await pool.fetchval(
        "SELECT count(*) FROM run_steps WHERE run_id = any($1::uuid[]) AND status = 'failed'", run_ids
    )
    stray_tasks = await pool.fetchval(
        "SELECT count(*) FROM tasks WHERE run_id IS NULL OR NOT run_id = any($1::uuid[])", run_ids
    )

    keyed_calls = recorder.calls("/keyed")
    applied_per_run = Counter(str(body.get("run_id")) for body in recorder.applied("/keyed").values())
    unkeyed = recorder.raw_counts("/unkeyed")
    unstable = [c for c in keyed_calls if c.key != f"{c.body.get('run_id')}:{keyed_seq}"]
    unknown = [
        c
        for c in recorder.calls()
        if c.path in ("/keyed", "/unkeyed") and _uuid(c.body.get("run_id")) not in ids
    ]
    expected = set(range(steps_per_run))
    verdict: dict[str, Any] = {
        "runs": len(run_ids),
        "lost": {
            "runs_not_completed": sum(1 for i in run_ids if status.get(i) != "completed"),
            "missing_checkpoints": sum(len(expected - set(seqs[i])) for i in run_ids),
            "missing_tasks": sum(1 for i in run_ids if tasks.get(i, 0) == 0),
            "missing_keyed_effects": sum(1 for i in run_ids if applied_per_run[str(i)] == 0),
            "missing_unkeyed_calls": sum(1 for i in run_ids if unkeyed[str(i)] == 0),
        },
        "duplicated": {
            "checkpoints": sum(n - 1 for i in run_ids for n in seqs[i].values() if n > 1),
            "tasks": sum(tasks.get(i, 0) - 1 for i in run_ids if tasks.get(i, 0) > 1),
            "keyed_effects": sum(applied_per_run[str(i)] - 1 for i in run_ids if applied_per_run[str(i)] > 1),
        },
        "unexpected": {
            "run_statuses": dict(Counter(str(s) for s in status.values() if s != "completed")),
            "missing_runs": len(ids - set(status)),
            "checkpoints_beyond_last_step": sum(len(set(seqs[i]) - expected) for i in run_ids),
            "keyed_calls_with_unstable_key": len(unstable),
            "calls_from_unknown_runs": len(unknown),
            "stray_tasks": stray_tasks,
            "failed_step_attempts": failed_attempts,
        },
        "at_least_once": {
            "unkeyed_calls": sum(unkeyed[str(i)] for i in run_ids),
            "unkeyed_duplicates": sum(unkeyed[str(i)] - 1 for i in run_ids if unkeyed[str(i)] > 1),
            "runs_with_unkeyed_duplicates": sum(1 for i in run_ids if unkeyed[str(i)] > 1),
            "keyed_raw_calls": len(keyed_calls),
            "keyed_repeats_dropped_by_receiver": sum(1 for c in keyed_calls if not c.applied),
            "requests_cut_off_by_kills": len(recorder.aborted()),
        },
    }
    samples = [(c.path, c.key, c.body) for c in (unstable + unknown)[:3]]
    if samples:
        verdict["samples_of_unexpected_calls"] = samples
    return verdict


def problems(verdict: dict[str, Any]) -> dict[str, Any]:
    """The non-zero counts under ``lost``, ``duplicated`` and ``unexpected``."""
    found: dict[str, Any] = {}
    for section in ("lost", "duplicated", "unexpected"):
        for name, value in verdict[section].items():
            if value:
                found[f"{section}.{name}"] = value
    return found


def print_verdict(title: str, verdict: dict[str, Any]) -> None:
    """Print the verdict as one JSON line (pytest shows it with -s or on failure)."""
    print(f"\nVERDICT {title}: {json.dumps(verdict, sort_keys=True, default=str)}")


def _uuid(value: Any) -> UUID | None:
    try:
        return UUID(str(value))
    except ValueError:
        return None


@dataclass
class Orphan:
    """A run a worker held (``in_progress``, its lease owner) when that worker died.

    Attributes:
        run_id: the run.
        token: its fencing token at the death.
        lease_expires_at: its lease expiry (database clock) as last extended by the dead
            worker; at most one lease TTL after the death.
        death: the death.
        reclaimed_at: ``time.monotonic()`` of the first poll that saw a newer token.
        reclaimed_db: the database clock at that poll.
        unclaimed_at: ``time.monotonic()`` of the last poll that saw the run still under the
            dead worker's token: the re-claim came after it. With ``reclaimed_at`` it brackets
            the re-claim, however long the monitor itself was kept from polling.
        no_claimer_db: the database clock at the last poll before the re-claim that found
            no live, ready worker (every worker dead or still starting): nothing could
            claim the run then, so its rescue is timed from no earlier than this.
        ended_unclaimed: the run ended under the dead worker's own token: the checkpoint it
            had sent before it died committed after the poll that found the run (PostgreSQL
            commits a pipelined transaction whose Sync arrived, even once its client is gone:
            a late commit, fenced like any other). Nothing was stranded, nothing to re-claim.
    """

    run_id: UUID
    token: int
    lease_expires_at: datetime
    death: Death
    reclaimed_at: float | None = None
    reclaimed_db: datetime | None = None
    unclaimed_at: float | None = None
    no_claimer_db: datetime | None = None
    ended_unclaimed: bool = False

    @property
    def stranded(self) -> bool:
        """Never re-claimed, and not ended by its dead worker's last commit either."""
        return self.reclaimed_at is None and not self.ended_unclaimed

    @property
    def since_death(self) -> float | None:
        """Seconds from the death being noticed to the re-claim being observed."""
        return None if self.reclaimed_at is None else self.reclaimed_at - self.death.at

    @property
    def surely_unclaimed_since_death(self) -> float | None:
        """Seconds from the death being noticed to the last poll that saw the run not yet
        re-claimed: a lower bound of the re-claim's latency, as ``since_death`` is an upper
        bound (the two differ by one poll period unless the monitor was held up)."""
        if self.reclaimed_at is None:
            return None
        return max((self.unclaimed_at or self.death.at) - self.death.at, 0.0)

    @property
    def after_expiry(self) -> float | None:
        """Seconds (database clock) from the lease expiry to the re-claim being observed."""
        if self.reclaimed_db is None:
            return None
        return (self.reclaimed_db - self.lease_expires_at).total_seconds()

    @property
    def after_claimable(self) -> float | None:
        """Seconds (database clock) from when a live worker could have re-claimed the run
        (its lease expired and a worker was ready) to the re-claim being observed."""
        if self.reclaimed_db is None:
            return None
        since = max(self.lease_expires_at, self.no_claimer_db or self.lease_expires_at)
        return max((self.reclaimed_db - since).total_seconds(), 0.0)


@dataclass
class LeaseMonitor:
    """Polls ``runs`` to find the runs each dead worker held and when they were re-claimed.

    A dead worker's runs are the ``in_progress`` rows still naming it as lease owner at the
    first poll after its death was noticed (within ~0.1 s; a live worker's lease has about
    2/3 of its TTL left at any moment, so none can have been re-claimed yet). A re-claim is
    observed as a higher ``fencing_token`` (every claim bumps it), at most one poll period
    after it happened: the latencies reported are upper bounds of the true ones.
    ``claimer_ready`` says whether some worker is alive and ready to claim (on a loaded
    machine a respawned worker takes seconds to start; no guarantee runs without one).
    """

    pool: asyncpg.Pool
    period: float = 0.1
    claimer_ready: Callable[[], bool] = lambda: True
    orphans: list[Orphan] = field(default_factory=list)
    pending: list[Death] = field(default_factory=list)
    polls: int = 0
    last_poll_at: float | None = None
    longest_gap: float = 0.0
    """The longest time between two polls' answers (a monitor kept from polling by a busy
    machine observes re-claims late: ``Orphan.unclaimed_at`` bounds them from below)."""

    def on_death(self, _worker: object, death: Death) -> None:
        self.pending.append(death)

    async def poll(self) -> list[asyncpg.Record]:
        # Before the query: its snapshot is no older, so a run it finds unclaimed was so then.
        sent = time.monotonic()
        rows = await self.pool.fetch(
            "SELECT id, status, lease_owner, fencing_token, lease_expires_at,"
            " clock_timestamp() AS db_now FROM runs"
        )
        now = time.monotonic()
        self.polls += 1
        if self.last_poll_at is not None:
            self.longest_gap = max(self.longest_gap, now - self.last_poll_at)
        self.last_poll_at = now
        deaths, self.pending = self.pending, []
        by_name = {d.name: d for d in deaths}
        for row in rows:
            death = by_name.get(row["lease_owner"])
            if death is not None and row["status"] == "in_progress":
                self.orphans.append(Orphan(row["id"], row["fencing_token"], row["lease_expires_at"], death))
        by_id = {row["id"]: row for row in rows}
        ready = self.claimer_ready()
        for orphan in self.orphans:
            row = by_id.get(orphan.run_id)
            if orphan.reclaimed_at is None and row is not None and row["fencing_token"] > orphan.token:
                orphan.reclaimed_at = now
                orphan.reclaimed_db = row["db_now"]
            elif orphan.reclaimed_at is None and row is not None and row["status"] in ENDED:
                orphan.ended_unclaimed = True
            elif orphan.reclaimed_at is None and row is not None and not ready:
                orphan.no_claimer_db = row["db_now"]
            if orphan.reclaimed_at is None and row is not None and row["fencing_token"] == orphan.token:
                orphan.unclaimed_at = sent
        return list(rows)

    def summary(self) -> dict[str, Any]:
        done = [o for o in self.orphans if o.reclaimed_at is not None]
        since = [o.since_death for o in done if o.since_death is not None]
        after = [o.after_expiry for o in done if o.after_expiry is not None]
        claimable = [o.after_claimable for o in done if o.after_claimable is not None]
        return {
            "orphaned_runs": len(self.orphans),
            "never_reclaimed": sum(1 for o in self.orphans if o.stranded),
            "ended_by_late_commit": sum(1 for o in self.orphans if o.ended_unclaimed),
            "since_death_s": _figures(since),
            "after_lease_expiry_s": _figures(after),
            "after_a_worker_could_claim_s": _figures(claimable),
            "waited_for_a_ready_worker": sum(1 for o in self.orphans if o.no_claimer_db is not None),
            "longest_poll_gap_s": round(self.longest_gap, 3),
        }


def _figures(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {
        "min": round(ordered[0], 3),
        "p50": round(statistics.median(ordered), 3),
        "p95": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 3),
        "max": round(ordered[-1], 3),
    }


async def reconcile_ingest(
    pool: asyncpg.Pool, producers: list[dict[str, Any]], *, topic: str, workflow_id: UUID | None = None
) -> dict[str, Any]:
    """Reconcile what producers were told with what is stored; return the verdict.

    ``producers`` are ``tests.support.producer`` results for ``topic``. Acknowledged means a
    2xx answer (or, for a naive producer, whatever it counted as one). With ``workflow_id``
    the dispatcher's side is reconciled too: every stored event decided once (``started`` or
    ``enrolled``), every run started by exactly one decision and terminal, and no two active
    runs sharing an enrollment key now.
    """
    answers: dict[str, list[list[Any]]] = defaultdict(list)
    acked: set[str] = set()
    sent: set[str] = set()
    statuses: Counter[str] = Counter()
    for result in producers:
        for message_id, found in result["answers"].items():
            answers[message_id].extend(found)
        acked |= set(result["answers"]) | set(result["naive_acked"])
        sent |= {f"{result['prefix']}-{i}" for i in range(result["events"])}
        statuses.update(result["statuses"])
    rows = await pool.fetch(
        "SELECT message_id, count(*) AS n, min(seq) AS seq FROM events WHERE topic = $1 GROUP BY message_id",
        topic,
    )
    stored = {r["message_id"]: r["seq"] for r in rows}
    created = Counter(m for m, found in answers.items() for _seq, new in found if new)
    verdict: dict[str, Any] = {
        "events": len(sent),
        "posts": sum(n for s, n in statuses.items()),
        "reposts": sum(r["reposts"] for r in producers),
        "statuses": dict(sorted(statuses.items())),
        "stored": len(stored),
        "lost": {"acknowledged_events": len(acked - set(stored))},
        "duplicated": {
            "stored_rows": sum(r["n"] - 1 for r in rows),
            "answered_created_twice": sum(1 for n in created.values() if n > 1),
        },
        "unexpected": {
            "http_5xx_other_than_503": sum(n for s, n in statuses.items() if s[0] == "5" and s != "503"),
            "http_other_than_2xx_or_503": sum(
                n for s, n in statuses.items() if s[0] in "134" and not s.startswith("error")
            ),
            "503_without_retry_after": sum(r["503_without_retry_after"] for r in producers),
            "answers_not_the_stored_event": sum(
                1 for m, found in answers.items() for seq, _new in found if m in stored and seq != stored[m]
            ),
            "unreadable_2xx_bodies": sum(r["unreadable_2xx_bodies"] for r in producers),
            "stored_but_never_sent": len(set(stored) - sent),
            "producers_gave_up": sum(len(r["gave_up"]) for r in producers),
        },
    }
    if workflow_id is not None:
        await _reconcile_dispatch(pool, verdict, set(stored), topic=topic, workflow_id=workflow_id)
    return verdict


async def _reconcile_dispatch(
    pool: asyncpg.Pool, verdict: dict[str, Any], stored: set[str], *, topic: str, workflow_id: UUID
) -> None:
    decisions = await pool.fetch(
        "SELECT event_message_id, decision, run_id FROM dispatch_decisions"
        " WHERE workflow_id = $1 AND event_topic = $2",
        workflow_id,
        topic,
    )
    runs = await pool.fetch(
        "SELECT id, status, active, enrollment_key FROM runs WHERE workflow_id = $1", workflow_id
    )
    shared_keys = await pool.fetchval(
        "SELECT count(*) FROM (SELECT 1 FROM runs WHERE workflow_id = $1 AND active"
        " AND enrollment_key IS NOT NULL GROUP BY enrollment_key HAVING count(*) > 1) k",
        workflow_id,
    )
    per_event = Counter(d["event_message_id"] for d in decisions)
    kinds = Counter(d["decision"] for d in decisions)
    started = Counter(d["run_id"] for d in decisions if d["decision"] == "started")
    run_ids = {r["id"] for r in runs}
    verdict["decisions"] = dict(sorted(kinds.items()))
    verdict["runs"] = len(runs)
    verdict["lost"].update(
        events_undecided=len(stored - set(per_event)),
        started_runs_missing=len(set(started) - run_ids),
        runs_not_terminal=sum(1 for r in runs if r["active"]),
    )
    verdict["duplicated"].update(
        decisions=sum(n - 1 for n in per_event.values() if n > 1),
        starts_per_run=sum(n - 1 for n in started.values() if n > 1),
    )
    verdict["unexpected"].update(
        decisions_other_than_started_or_enrolled=sum(
            n for k, n in kinds.items() if k not in ("started", "enrolled")
        ),
        decisions_for_unstored_events=len(set(per_event) - stored),
        runs_without_a_start_decision=len(run_ids - set(started)),
        runs_ended_other_than_completed=dict(
            Counter(r["status"] for r in runs if not r["active"] and r["status"] != "completed")
        ),
        keys_with_two_active_runs=shared_keys,
    )


async def run_until_terminal(
    monitor: LeaseMonitor,
    supervisor: Supervisor,
    stop: asyncio.Event,
    starter: Coroutine[Any, Any, None],
    loops: list[Coroutine[Any, Any, None]],
    run_ids: list[UUID],
    deadline: float,
    enough: Callable[[], Awaitable[bool]] | None = None,
) -> None:
    """Start the workers, the ``starter`` (it fills ``run_ids``) and the ``loops`` (killers);
    poll the monitor until every started run is terminal, ``enough`` holds (a negative
    control that has found what it looks for) or ``deadline`` seconds passed; then set
    ``stop`` and stop everything, workers included."""
    supervisor.start()
    tasks = [asyncio.create_task(supervisor.watch(stop)), *(asyncio.create_task(loop) for loop in loops)]
    started = time.monotonic()
    start_task = asyncio.create_task(starter)
    try:
        while time.monotonic() - started < deadline:
            rows = await monitor.poll()
            if enough is not None and await enough():
                break
            if start_task.done():
                start_task.result()
                statuses = {r["id"]: r["status"] for r in rows}
                if all(statuses[i] in ("completed", "failed", "canceled") for i in run_ids):
                    break
            await asyncio.sleep(monitor.period)
        await monitor.poll()  # one more, so that the last re-claims are observed
    finally:
        stop.set()
        start_task.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(start_task, *tasks, return_exceptions=True)
        supervisor.stop_all()
