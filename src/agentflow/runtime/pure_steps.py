"""Steps that a held run ran since its last checkpoint and whose rows ride in the next step's
checkpoint instead of a commit each: steps of pure nodes (``NodeSpec.pure``), in a run
whose branches run at once any step that ended beside another already ended, and an agent's
decision whose calls all write only the engine's own tables (``SHARED_CALLS``).

A pure node only computes its output from what it reads, so a worker that dies before that
checkpoint loses nothing another cannot redo: the next claim runs the steps again from the
stored state, with the same numbers, and gets what the lost checkpoint would have held. A
step that ended beside another loses nothing either: the other's checkpoint goes out at once,
no later than the step's own would have, and nothing starts before it, so no step's effects
wait on it longer than they did. The checkpoint that writes them is fenced on the step counter
the run's row still holds (that of the first of them) and moves it where the last step leaves
it. So is the checkpoint after steps written ahead of the run's row (``store.steps_ahead``):
``behind`` keeps the counter that row still holds.
"""

from __future__ import annotations

import time
from dataclasses import replace

from agentflow.core.agent_context import DECIDE_KIND
from agentflow.core.agent_state import needs_approval
from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.statuses import RunStatus
from agentflow.runtime.step import Cursor, StepOutcome
from agentflow.store import steps_ahead
from agentflow.store.checkpoints import NO_EFFECTS, Effects, PriorStep

MAX_KEPT = 16
"""Pure steps one checkpoint may carry besides its own."""
MAX_AHEAD = steps_ahead.STRETCH
"""Steps written ahead of the run's row at most between two full checkpoints (a claim looks
no further)."""
AHEAD_SECS = 0.05
"""Seconds after a full checkpoint that steps may be written ahead of the run's row: a
reader of the row alone sees at most this much (and the step running then) behind."""


def deferrable(
    config: StructuredConfig, outcome: StepOutcome, cursor: Cursor, *, beside: bool = False
) -> bool:
    """Whether ``outcome`` may be written with the next step's checkpoint instead of its own:
    the first attempt of a pure node's step (of any node's with ``beside``: another step has
    ended already and is checkpointed at once) that completed and moves the run on with
    nothing else to write, in a state without timers or loops (those need the database's clock
    or counts at their checkpoint)."""
    node_id, run = outcome.step.node_id, outcome.run
    return (
        node_id is not None
        and (beside or config.node(node_id).pure)
        and cursor.attempt == 0
        and outcome.step.status == "completed"
        and run.advance
        and run.status == RunStatus.IN_PROGRESS.value
        and outcome.effects == NO_EFFECTS
        and not run.consumed
        and run.wake_after is None
        and run.wake_at is None
        and "timers" not in run.state
        and "loops" not in run.state
    )


SHARED_CALLS = frozenset({"create_task", "send_notification", "complete"})
"""An agent's built-in calls whose every effect their checkpoint writes (a task, a notification
for the outbox, the run's end) and that call no model: a decision asking only for these
rides in the checkpoint of its first call."""


def decision_deferrable(config: AgentConfig, outcome: StepOutcome, cursor: Cursor) -> bool:
    """Whether ``outcome``, an agent's decision, may be written with its first call's
    checkpoint: its first attempt completed, with no write but its model call's usage (and
    the inbox rows it used, which that checkpoint consumes), and every call it asks for is one
    of ``SHARED_CALLS`` that needs no approval. Nothing those calls do reaches outside the
    engine's tables before that commit, so a worker that dies before it loses the decision and
    its calls alike (the next claim asks the model again, the same rows unconsumed before it),
    and none is made twice."""
    run = outcome.run
    agent = run.state.get("agent")
    calls = agent.get("pending") if isinstance(agent, dict) else None
    return (
        outcome.step.kind == DECIDE_KIND
        and cursor.attempt == 0
        and outcome.step.status == "completed"
        and run.advance
        and run.status == RunStatus.IN_PROGRESS.value
        and outcome.effects == Effects(usage=outcome.effects.usage)
        and run.wake_after is None
        and run.wake_at is None
        and isinstance(calls, list)
        and bool(calls)
        and all(
            isinstance(c, dict)
            and c.get("name") in SHARED_CALLS
            and not needs_approval(config, str(c.get("name")))
            for c in calls
        )
    )


def aheadable(config: StructuredConfig, outcome: StepOutcome, cursor: Cursor) -> bool:
    """Whether ``outcome`` may be written as its row alone, ahead of the run's row
    (``store.steps_ahead``): as ``deferrable`` for any node, but for one model call's usage
    (its row and the workspace's day take it; the run's totals follow with its row), and the
    step at the cursor's number moving the counter one on (the number a claim gives back when
    it catches up)."""
    seq, usage = cursor.step_seq, outcome.effects.usage
    if usage is not None:  # a row holds no count of calls: the catch-up counts one
        if usage.calls != 1 or outcome.effects != Effects(usage=usage):
            return False
        outcome = replace(outcome, effects=NO_EFFECTS)
    return (
        outcome.step.seq == seq
        and outcome.run.next_counter in (None, seq + 1)
        and deferrable(config, outcome, cursor, beside=True)
    )


class PureSteps:
    """The pure steps a run's driver keeps for its next checkpoint.

    Attributes:
        kept: the steps, in the order they ran (empty after each checkpoint).
    """

    def __init__(self, behind: int | None = None, full_at: float | None = None) -> None:
        self.kept: list[PriorStep] = []
        self._counter = 0
        self.behind = behind  # the row's counter while steps are written ahead of it
        # When the last full checkpoint of this lease returned, or the claim, when the run's row
        # was current then and had no rescue counts to reset (``drive_in_sequence``'s full_at).
        self._full_at: float | None = full_at
        self._ahead = 0  # steps written ahead since
        # Whether steps written ahead of the row may hold usage its totals lack: some of this
        # lease's did, or the claim found steps ahead (whoever wrote them).
        self._usage_ahead = behind is not None

    def may_write_ahead(self, config: StructuredConfig, outcome: StepOutcome, cursor: Cursor) -> bool:
        """Whether ``outcome`` may be written ahead of the run's row: not the lease's first
        checkpoint when there are rescue counts to reset (a full one resets them, as progress
        does), with no kept steps, within ``MAX_AHEAD`` and ``AHEAD_SECS`` of the last full
        checkpoint (or of a claim that found the row current and nothing to reset)."""
        return (
            self._full_at is not None
            and not self.kept
            and self._ahead < MAX_AHEAD
            and time.monotonic() - self._full_at < AHEAD_SECS
            and aheadable(config, outcome, cursor)
        )

    def row_counter(self, cursor: Cursor) -> int:
        """The step counter the run's row holds when ``cursor``'s step runs."""
        return cursor.step_seq if self.behind is None else self.behind

    def ahead(self, cursor: Cursor, outcome: StepOutcome) -> None:
        """``outcome``, the step ``cursor`` was at, was written ahead of the run's row."""
        if self.behind is None:
            self.behind = cursor.step_seq
        self._ahead += 1
        self._usage_ahead = self._usage_ahead or outcome.effects.usage is not None

    def keep(
        self, config: StructuredConfig, outcome: StepOutcome, cursor: Cursor, *, beside: bool = False
    ) -> bool:
        """Keep ``outcome`` (the step ``cursor`` was at) for the next checkpoint when it may
        wait for it (``beside``: as ``deferrable``); False: checkpoint it now."""
        if len(self.kept) >= MAX_KEPT or not deferrable(config, outcome, cursor, beside=beside):
            return False
        if not self.kept:
            self._counter = self.row_counter(cursor)
        self.kept.append(PriorStep(outcome.step, outcome.run.state, time.monotonic()))
        return True

    def keep_decision(self, config: AgentConfig, outcome: StepOutcome, cursor: Cursor) -> bool:
        """Keep ``outcome``, an agent's decision, for its first call's checkpoint when it may
        wait for it (``decision_deferrable``), alone; False: checkpoint it now."""
        if self.kept or not decision_deferrable(config, outcome, cursor):
            return False
        self._counter = self.row_counter(cursor)
        run, usage = outcome.run, outcome.effects.usage
        self.kept.append(PriorStep(outcome.step, run.state, time.monotonic(), usage, run.consumed))
        return True

    def fence(self, outcome: StepOutcome) -> StepOutcome:
        """``outcome``'s checkpoint, fenced on the counter the run's row holds when steps are
        kept or were written ahead of it (moving it where ``outcome`` would), and adding the
        usage of those ahead of it to the run's totals when they may have some."""
        counter = self._counter if self.kept else self.behind
        if counter is None:
            return outcome
        run = outcome.run
        own = outcome.step.seq if run.counter is None else run.counter
        moved = own + int(run.advance) if run.next_counter is None else run.next_counter
        used = self._usage_ahead and self.behind is not None
        return replace(outcome, run=replace(run, counter=counter, next_counter=moved, ahead_usage=used))

    def written(self) -> None:
        """The kept steps were checkpointed (and the run's row caught up with its steps)."""
        self.kept = []
        self.behind = None
        self._full_at, self._ahead, self._usage_ahead = time.monotonic(), 0, False
