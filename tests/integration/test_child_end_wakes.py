"""A child run's end wakes its parent even when it ends while the parent runs (migration 0036).

The race: the parent counts its loop's items, a child ends before the parent's checkpoint
puts it to sleep (its trigger finds the parent running and cannot wake it), and the
checkpoint must then make the wait due at once, because the child's end was counted on the
parent's row after the count the step saw. Driven by hand, no worker: exact interleavings.
"""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.core.records import RunRecord
from agentflow.engine import DEFAULT_WORKSPACE, Engine
from agentflow.store import loops, runs

WS = DEFAULT_WORKSPACE


async def _parent_with_a_child(engine: Engine) -> tuple[RunRecord, int, UUID]:
    """A run claimed by worker "w", with one loop item (a child run of its step 0) not ended."""
    await engine.publish_workflow(
        {"name": "parent", "kind": "structured", "nodes": [{"id": "a", "type": "tool", "tool": "echo"}]}
    )
    run = await engine.start_run("parent")
    (claimed,) = await runs.claim(engine.db.pool, "w", 1, 30.0, 3)
    child = uuid.uuid4()
    await engine.db.pool.execute(
        "INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input, state,"
        " parent_run_id, parent_step, item_index, due_at)"
        " SELECT workspace_id, $2, workflow_id, workflow_version, 'created', input, '{}', id, 0, 0, 'infinity'"
        " FROM runs WHERE id = $1",
        run.id,
        child,
    )
    return claimed.run, claimed.run.fencing_token, child


async def _end(engine: Engine, child: UUID) -> None:
    await engine.db.pool.execute(
        "UPDATE runs SET status = 'completed', completed_at = now(), due_at = NULL WHERE id = $1", child
    )


def _loop_wait(seen: int | None) -> tuple[Any, ...]:
    move = runs.RunWrite(
        "waiting", "loop", {"loops": [{"node": "a", "seq": 0, "total": 1, "released": 1}]}, None, None,
        False, wake_after=3600.0, children_seen=seen,
    )  # fmt: skip
    step = runs.StepWrite(0, 1, "a", "for_each", None, "completed", None, None, None, 0.0)
    return move, step


async def _checkpoint_after_a_child_ended_during_the_count(engine: Engine, remember: bool) -> float:
    parent, token, child = await _parent_with_a_child(engine)
    counted = await loops.progress(engine.db.pool, WS, parent.id, [(0, 1)])
    assert counted.children_ended == 0 and counted.loops[0].completed == 0
    await _end(engine, child)  # while the parent runs: its trigger cannot wake it
    move, step = _loop_wait(counted.children_ended if remember else None)
    done = await runs.checkpoint(engine.db.pool, WS, parent.id, token, "w", move, step)
    assert done is not None and done.status == "waiting" and done.due_in is not None
    return float(done.due_in)


async def test_a_child_that_ends_during_the_count_makes_the_wait_due_at_once(engine: Engine) -> None:
    due_in = await _checkpoint_after_a_child_ended_during_the_count(engine, remember=True)
    assert due_in <= 0, "the child's end was lost: the parent sleeps until its poll"


async def test_negative_control_without_the_count_seen_the_end_is_lost(engine: Engine) -> None:
    due_in = await _checkpoint_after_a_child_ended_during_the_count(engine, remember=False)
    assert due_in > 3500


async def test_a_count_reads_the_ends_and_the_items_alike(engine: Engine) -> None:
    parent, _token, child = await _parent_with_a_child(engine)
    await _end(engine, child)
    counted = await loops.progress(engine.db.pool, WS, parent.id, [(0, 1)])
    assert counted.children_ended == 1 and counted.loops[0].completed == 1
    assert counted.loops[0].items is not None and len(counted.loops[0].items) == 1
    nothing = await loops.progress(engine.db.pool, WS, parent.id, [(7, 3)])
    assert nothing.loops == {} and nothing.children_ended == 1, "a loop with no items yet counts none"


async def test_a_child_that_ends_while_its_parent_waits_wakes_it(engine: Engine) -> None:
    parent, token, child = await _parent_with_a_child(engine)
    counted = await loops.progress(engine.db.pool, WS, parent.id, [(0, 1)])
    move, step = _loop_wait(counted.children_ended)
    done = await runs.checkpoint(engine.db.pool, WS, parent.id, token, "w", move, step)
    assert done is not None and done.due_in is not None and done.due_in > 3500, "nothing ended yet"
    await _end(engine, child)
    row = await engine.db.pool.fetchrow(
        "SELECT children_ended, due_at <= now() AS due FROM runs WHERE id = $1", parent.id
    )
    assert row["children_ended"] == 1 and row["due"], "the end woke the waiting parent"
