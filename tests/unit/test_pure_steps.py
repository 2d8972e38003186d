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
from agentflow.runtime import pure_steps
from agentflow.runtime.pure_steps import MAX_AHEAD, MAX_KEPT, PureSteps, aheadable, deferrable
from agentflow.runtime.step import Cursor, StepOutcome, _outcome
from agentflow.store.checkpoints import Effects, ModelUsage

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


def test_a_step_that_only_moves_the_run_on_may_be_written_ahead_after_a_full_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pure = PureSteps()
    outcome = ran("call", at(3))
    assert aheadable(CONFIG, outcome, at(3))
    assert not pure.may_write_ahead(CONFIG, outcome, at(3)), "the lease's first checkpoint is full"
    pure.written()
    assert pure.may_write_ahead(CONFIG, outcome, at(3))
    assert not pure.may_write_ahead(CONFIG, ran("call", at(3, 1)), at(3, 1)), "a retried attempt"
    taken = replace(outcome, run=replace(outcome.run, next_counter=5))
    assert not aheadable(CONFIG, taken, at(3)), "a counter a claim could not tell from the step"
    assert pure.keep(CONFIG, ran("shape", at(3)), at(3))
    assert not pure.may_write_ahead(CONFIG, outcome, at(4)), "kept steps ride in a full checkpoint"
    pure.written()
    for seq in range(3, 3 + MAX_AHEAD):
        assert pure.may_write_ahead(CONFIG, ran("call", at(seq)), at(seq))
        pure.ahead(at(seq), ran("call", at(seq)))
    last = 3 + MAX_AHEAD
    assert not pure.may_write_ahead(CONFIG, ran("call", at(last)), at(last)), "at most MAX_AHEAD"
    pure.written()
    monkeypatch.setattr(pure_steps, "AHEAD_SECS", 0.0)
    assert not pure.may_write_ahead(CONFIG, outcome, at(3)), "only soon after a full checkpoint"


def test_the_checkpoint_after_steps_written_ahead_is_fenced_on_the_rows_counter() -> None:
    pure = PureSteps()
    pure.written()
    pure.ahead(at(3), ran("call", at(3)))
    pure.ahead(at(4), ran("call", at(4)))
    assert pure.row_counter(at(5)) == 3
    fenced = pure.fence(ran("call", at(5))).run
    assert (fenced.counter, fenced.next_counter) == (3, 6), "fenced on the row's, moved past the step"
    failed = pure.fence(ran("call", at(5), step_status="failed", status=RunStatus.FAILED)).run
    assert (failed.counter, failed.next_counter) == (3, 5), "a failed step still catches the row up"
    assert pure.keep(CONFIG, ran("shape", at(5)), at(5))
    assert pure.fence(ran("call", at(6))).run.counter == 3, "kept steps too"
    pure.written()
    assert pure.behind is None and pure.fence(ran("call", at(7))).run.counter == 7


def test_a_claim_that_found_steps_ahead_fences_its_first_checkpoint_on_the_rows_counter() -> None:
    pure = PureSteps(behind=2)
    fenced = pure.fence(ran("call", at(5))).run
    assert fenced.counter == 2
    assert fenced.ahead_usage, "whoever wrote the steps found ahead may have called a model"


def used(outcome: StepOutcome, calls: int = 1, **effects: Any) -> StepOutcome:
    """``outcome`` with a model call's usage (``calls`` of them) and other ``effects``."""
    usage = ModelUsage("scripted:m", 10, 5, 0, 0.01, calls)
    return replace(outcome, effects=Effects(usage=usage, **effects))


def test_a_model_step_of_one_call_may_go_ahead_and_the_next_full_checkpoint_counts_it() -> None:
    assert aheadable(CONFIG, used(ran("call", at(3))), at(3))
    assert not aheadable(CONFIG, used(ran("call", at(3)), calls=2), at(3)), "a row holds one call"
    assert not aheadable(CONFIG, used(ran("call", at(3)), tasks=[{"title": "t"}]), at(3)), "other writes"
    pure = PureSteps()
    pure.written()
    pure.ahead(at(3), ran("call", at(3)))
    assert not pure.fence(ran("call", at(4))).run.ahead_usage, "no model call went ahead"
    pure.ahead(at(4), used(ran("call", at(4))))
    pure.ahead(at(5), ran("call", at(5)))
    fenced = pure.fence(ran("call", at(6))).run
    assert (fenced.counter, fenced.ahead_usage) == (3, True)
    pure.written()
    assert not pure.fence(ran("call", at(7))).run.ahead_usage
