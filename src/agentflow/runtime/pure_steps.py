"""Steps that a held run ran since its last checkpoint and whose rows ride in the next step's
checkpoint instead of a commit each: steps of pure nodes (``NodeSpec.pure``), and in a run
whose branches run at once, any step that ended beside another already ended.

A pure node only computes its output from what it reads, so a worker that dies before that
checkpoint loses nothing another cannot redo: the next claim runs the steps again from the
stored state, with the same numbers, and gets what the lost checkpoint would have held. A
step that ended beside another loses nothing either: the other's checkpoint goes out at once,
no later than the step's own would have, and nothing starts before it, so no step's effects
wait on it longer than they did. The checkpoint that writes them is fenced on the step counter
the run's row still holds (that of the first of them) and moves it where the last step leaves
it.
"""

from __future__ import annotations

import time
from dataclasses import replace

from agentflow.core.definitions import StructuredConfig
from agentflow.core.statuses import RunStatus
from agentflow.runtime.step import Cursor, StepOutcome
from agentflow.store.checkpoints import NO_EFFECTS, PriorStep

MAX_KEPT = 16
"""Pure steps one checkpoint may carry besides its own."""


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


class PureSteps:
    """The pure steps a run's driver keeps for its next checkpoint.

    Attributes:
        kept: the steps, in the order they ran (empty after each checkpoint).
    """

    def __init__(self) -> None:
        self.kept: list[PriorStep] = []
        self._counter = 0

    def keep(
        self, config: StructuredConfig, outcome: StepOutcome, cursor: Cursor, *, beside: bool = False
    ) -> bool:
        """Keep ``outcome`` (the step ``cursor`` was at) for the next checkpoint when it may
        wait for it (``beside``: as ``deferrable``); False: checkpoint it now."""
        if len(self.kept) >= MAX_KEPT or not deferrable(config, outcome, cursor, beside=beside):
            return False
        if not self.kept:
            self._counter = cursor.step_seq  # what the run's row holds
        self.kept.append(PriorStep(outcome.step, outcome.run.state, time.monotonic()))
        return True

    def fence(self, outcome: StepOutcome) -> StepOutcome:
        """``outcome``'s checkpoint, fenced on the counter the run's row holds when steps are
        kept (moving it where ``outcome`` would)."""
        if not self.kept:
            return outcome
        run = outcome.run
        own = outcome.step.seq if run.counter is None else run.counter
        moved = own + int(run.advance) if run.next_counter is None else run.next_counter
        return replace(outcome, run=replace(run, counter=self._counter, next_counter=moved))

    def written(self) -> None:
        """The kept steps were checkpointed."""
        self.kept = []
