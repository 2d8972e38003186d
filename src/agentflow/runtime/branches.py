"""Run a graph run's ready nodes at once, up to its workflow's ``max_parallel``.

The worker that holds the run starts each ready activation as its own task and writes their
checkpoints one at a time, as they end: each checkpoint moves the frontier from the state the
previous one left, so branches never overwrite each other, and it is fenced on the lease and
on the run's step counter like any other.

Step numbers must not change when a worker dies and another runs a node again (they are the
idempotency keys tools send). A ready activation that has not started takes its number by its
place: the first such takes the run's counter, the next one more, and so on, so a worker that
loads the same state gives the same numbers. Once started it keeps its number in the state
(``seq``), and the counter written is past every number handed out. A failed attempt retries on
its own (a timer in the frontier) while the other branches go on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from agentflow.core import planner
from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.graph import frontier
from agentflow.core.graph.frontier import Activation
from agentflow.core.records import RunRecord
from agentflow.nodes.base import NodeEnv
from agentflow.runtime import step
from agentflow.runtime.failpoints import failpoint
from agentflow.runtime.pure_steps import PureSteps
from agentflow.store.checkpoints import Checkpointed, PriorStep

Checkpoint = Callable[[step.StepOutcome, Sequence[PriorStep]], Awaitable[Checkpointed | None]]
LoadLoops = Callable[[step.Cursor], Awaitable[step.Cursor]]
Refresh = Callable[[step.Cursor, Checkpointed], Awaitable[step.Cursor]]


class BranchDriver:
    """Drives one held run whose graph fans out, several activations at a time.

    Args:
        config: the run's workflow version.
        run: the claimed run.
        env: tools and threads for the nodes.
        token: the run's fencing token.
        checkpoint: writes an outcome (with pure steps that ran before it); None when the run
            has no more work here (it ended, waits, was canceled, or the lease was lost).
        load_loops: the cursor with the items of the run's running loops counted.
        refresh: the cursor after a checkpoint that reports new inbox deliveries.
        stopping: set when the worker stops: no new activation starts; the run is handed
            back once the running ones are checkpointed.
        steps: the worker's set of this run's running steps (canceled when the lease is lost).
    """

    def __init__(
        self,
        config: StructuredConfig,
        run: RunRecord,
        env: NodeEnv,
        token: int,
        *,
        checkpoint: Checkpoint,
        load_loops: LoadLoops,
        refresh: Refresh,
        stopping: asyncio.Event,
        steps: set[asyncio.Future[step.Ran]],
    ) -> None:
        self.config, self.run, self.env, self.token = config, run, env, token
        self._graph = config.graph
        self._checkpoint, self._load_loops, self._refresh = checkpoint, load_loops, refresh
        self._stopping = stopping
        self._steps = steps
        self._running: dict[asyncio.Future[step.Ran], Activation] = {}

    async def drive(self, cursor: step.Cursor) -> bool:
        """Run activations until the run leaves this worker. Returns True when the run is
        still ours and idle because the worker stops (the caller releases it)."""
        failpoint("before_step")
        counter = cursor.step_seq  # the next number no activation has taken
        seen_at = time.monotonic()  # when cursor.now was the database's time
        pure = PureSteps()
        holding = False  # a step is kept beside an ended one: checkpoint that before starting more
        try:
            while True:
                now = _estimate(cursor.now, seen_at)
                state = planner.released(self.config, cursor.state, now, inbox_news=bool(cursor.inbox.view()))
                current = frontier.load(state, self._graph)
                # Nothing starts while a step kept beside another waits for that one's checkpoint.
                if not self._stopping.is_set() and not holding:
                    current, state, counter = self._start(cursor, current, state, counter)
                cursor = replace(cursor, state=state)
                if not self._running:
                    if self._stopping.is_set():
                        return True
                    # Nothing runs and nothing is ready: loops to count, timers, or the end.
                    if "loops" in state:
                        cursor = await self._load_loops(cursor)
                    outcome = await step.execute(self.config, self.run, cursor, self.env, self.token)
                else:
                    ended = await self._first_ended(current, now)
                    if ended is None:
                        continue  # a timer is due: release it
                    outcome = await step.decide(
                        self.config,
                        cursor.state,
                        ended,
                        cursor,
                        taken=counter - cursor.step_seq,
                        concurrent=True,
                    )
                # A pure step that ended with nothing else running rides in the next checkpoint:
                # the activations it readies take their numbers by place, as a worker that
                # runs it again from the stored state gives them.
                if not holding and not self._running and pure.keep(self.config, outcome, cursor):
                    cursor = cursor.after(outcome)
                    counter = cursor.step_seq
                    continue
                # A step that ended beside others already ended rides in their checkpoint,
                # which goes out at once: the branches of a fan-out share a commit.
                holding = self._another_ended() and pure.keep(self.config, outcome, cursor, beside=True)
                if holding:
                    cursor = cursor.after(outcome)
                    counter = cursor.step_seq
                    continue
                failpoint("after_step")
                done = await self._checkpoint(pure.fence(outcome), pure.kept)
                if done is None:
                    return False
                pure.written()
                cursor = await self._refresh(cursor.after(outcome, done), done)
                counter, seen_at = cursor.step_seq, time.monotonic()
        finally:
            for task in self._running:
                task.cancel()
                self._steps.discard(task)

    def _start(
        self, cursor: step.Cursor, current: frontier.Frontier, state: dict[str, Any], counter: int
    ) -> tuple[frontier.Frontier, dict[str, Any], int]:
        """Start ready activations up to the limit; the state marks each with its number."""
        running = {a.seq for a in self._running.values()}
        free = self.config.parallel_limit - len(self._running)
        numbers: dict[int, int] = {}
        for index, activation in enumerate(current.ready):
            if free <= 0:
                break
            if activation.seq is not None and activation.seq in running:
                continue
            if activation.seq is None:
                numbers[index], counter = counter, counter + 1
            else:
                numbers[index] = activation.seq
            free -= 1
        if not numbers:
            return current, state, counter
        marked = frontier.mark_started(current, numbers)
        state = frontier.dump(marked, state, self._graph)
        view = replace(cursor, state=state)
        for index in numbers:
            activation = marked.ready[index]
            assert activation.seq is not None
            task = asyncio.ensure_future(
                step.run_activation(
                    self.config, self.run, view, activation, activation.seq, activation.failures + 1,
                    self.env, self.token,
                )
            )  # fmt: skip
            self._running[task] = activation
            self._steps.add(task)
        return marked, state, counter

    def _another_ended(self) -> bool:
        """Whether a running activation has ended already (its outcome is next at once)."""
        return any(task.done() for task in self._running)

    async def _first_ended(self, current: frontier.Frontier, now: datetime | None) -> step.Ran | None:
        """The first running activation to end, or None when a timer falls due first."""
        wait = _until_next_timer(current, now)
        ended, _ = await asyncio.wait(self._running, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        if not ended:
            return None
        task = next(t for t in self._running if t in ended)  # in start order
        del self._running[task]
        self._steps.discard(task)
        return task.result()


def _estimate(db_now: datetime | None, seen_at: float) -> datetime | None:
    """The database's time now, at most: its time at the last checkpoint plus the time
    since by this process's monotonic clock (never ahead, so no timer fires early)."""
    return None if db_now is None else db_now + timedelta(seconds=time.monotonic() - seen_at)


def _until_next_timer(current: frontier.Frontier, now: datetime | None) -> float | None:
    """Seconds until the earliest stamped timer (None: no timer to wait for)."""
    _, at = frontier.earliest(current)
    if at is None or now is None:
        return None
    return max((datetime.fromisoformat(at) - now).total_seconds(), 0.0) + 0.001


def in_branches(config: AgentConfig | StructuredConfig) -> bool:
    """Whether a run of ``config`` runs its nodes at once (a ``BranchDriver``), not one after
    another (``runtime.sequence``)."""
    return isinstance(config, StructuredConfig) and config.parallel_limit > 1 and config.graph.fans_out
