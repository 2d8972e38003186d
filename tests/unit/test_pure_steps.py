"""Which steps wait for the next checkpoint (``runtime.pure_steps``), and how that checkpoint
is fenced."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.statuses import RunStatus
from agentflow.core.step_results import Transition
from agentflow.runtime.pure_steps import MAX_KEPT, PureSteps, deferrable
from agentflow.runtime.step import Cursor, StepOutcome, _outcome
from agentflow.store.checkpoints import Effects

CONFIG = validate_config(
    {
        "name": "g",
        "kind": "structured",
        "nodes": [
            {"id": "shape", "type": "mapping", "output": {"a": 1}},
            {"id": "call", "type": "tool", "tool": "echo"},
            {"id": "done", "type": "finish"},
        ],
    }
)
assert isinstance(CONFIG, StructuredConfig)
STATE: dict[str, Any] = {"node": "call"}


def ran(node_id: str, cursor: Cursor, **transition: Any) -> StepOutcome:
    """The outcome of ``node_id``'s step at ``cursor``, completed and moving on unless told."""
    t = Transition(
        **{"status": RunStatus.IN_PROGRESS, "state": STATE, "step_status": "completed", **transition}
    )
    counter = cursor.step_seq + int(t.advances)
    return _outcome(t, cursor, 1, node_id, "mapping", None, {"in": 1}, {"a": 1}, None, 0.001, [],
                    next_counter=counter)  # fmt: skip


def at(seq: int, attempt: int = 0) -> Cursor:
    return Cursor({"node": "shape"}, seq, attempt, {})


def test_a_pure_nodes_completed_first_attempt_waits_for_the_next_checkpoint() -> None:
    assert deferrable(CONFIG, ran("shape", at(3)), at(3))


@pytest.mark.parametrize(
    ("why", "outcome", "cursor"),
    [
        ("a node that acts", ran("call", at(3)), at(3)),
        ("a retried attempt", ran("shape", at(3, 1)), at(3, 1)),
        ("a failed attempt", ran("shape", at(3), step_status="failed"), at(3)),
        ("the run ends", ran("shape", at(3), status=RunStatus.COMPLETED), at(3)),
        (
            "the run waits",
            ran("shape", at(3), status=RunStatus.WAITING, wake_after=timedelta(seconds=5)),
            at(3),
        ),
        ("timers in the state", ran("shape", at(3), state={"node": "x", "timers": []}), at(3)),
        ("loops in the state", ran("shape", at(3), state={"node": "x", "loops": []}), at(3)),
    ],
)
def test_steps_that_need_their_own_checkpoint_do_not_wait(
    why: str, outcome: StepOutcome, cursor: Cursor
) -> None:
    assert not deferrable(CONFIG, outcome, cursor), why


def test_a_node_that_acts_waits_only_beside_a_step_already_ended() -> None:
    outcome = ran("call", at(3))
    assert not deferrable(CONFIG, outcome, at(3))
    assert deferrable(CONFIG, outcome, at(3), beside=True)
    with_task = replace(outcome, effects=Effects(tasks=[{"title": "t"}]))
    assert not deferrable(CONFIG, with_task, at(3), beside=True)  # its writes go in its own commit
    failed = ran("call", at(3), step_status="failed")
    assert not deferrable(CONFIG, failed, at(3), beside=True)


def test_a_pure_step_with_writes_of_its_own_does_not_wait() -> None:
    outcome = ran("shape", at(3))
    with_task = replace(outcome, effects=Effects(tasks=[{"title": "t"}]))
    assert not deferrable(CONFIG, with_task, at(3))
    consuming = replace(outcome, run=replace(outcome.run, consumed=(7,)))
    assert not deferrable(CONFIG, consuming, at(3))


def test_the_next_checkpoint_is_fenced_on_the_first_kept_steps_counter_and_moves_past_its_own() -> None:
    pure = PureSteps()
    assert pure.keep(CONFIG, ran("shape", at(3)), at(3))
    assert pure.keep(CONFIG, ran("shape", at(4)), at(4))
    assert [p.step.seq for p in pure.kept] == [3, 4]
    fenced = pure.fence(ran("call", at(5)))
    assert (fenced.run.counter, fenced.run.next_counter) == (3, 6)
    failed = pure.fence(ran("call", at(5), step_status="failed"))
    assert (failed.run.counter, failed.run.next_counter) == (3, 5), "a failed attempt stays at its step"
    pure.written()
    alone = ran("call", at(6))
    assert pure.kept == [] and pure.fence(alone) is alone


def test_at_most_max_kept_steps_wait_for_one_checkpoint() -> None:
    pure = PureSteps()
    kept = [pure.keep(CONFIG, ran("shape", at(n)), at(n)) for n in range(MAX_KEPT + 1)]
    assert kept == [True] * MAX_KEPT + [False]
    assert len(pure.kept) == MAX_KEPT
