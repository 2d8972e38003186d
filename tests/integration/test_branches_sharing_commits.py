"""Branches of one run that end together share a commit, on the real database.

When a branch's step ends while another running branch has ended already, the first rides in
the second's checkpoint, which goes out at once: one commit for both, each with its own row
and number. Nothing starts before that commit (a step's successors never run while the step
is unrecorded), and a step with writes of its own (a task row) still commits alone.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

import agentflow
import tests.support.tools  # noqa: F401  (registers add and echo)
from agentflow import StepContext
from agentflow.engine import Engine
from agentflow.runtime.worker import Worker
from agentflow.store import runs

_WRITTEN: dict[UUID, set[str]] = {}
"""Per run, the nodes whose rows a checkpoint has written (its own step and those riding in it),
recorded once the checkpoint returned."""
_RIDERS: dict[UUID, set[str]] = {}
"""Per run, the nodes whose rows rode in another step's checkpoint."""


@pytest.fixture(autouse=True)
def recorded_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    real = runs.checkpoint

    async def recording(*args: Any, **kwargs: Any) -> Any:
        done = await real(*args, **kwargs)
        run_id, step = args[2], args[6]
        prior = kwargs.get("prior", args[8] if len(args) > 8 else ())
        if done is not None:
            riders = {p.step.node_id for p in prior}
            _WRITTEN.setdefault(run_id, set()).update({step.node_id, *riders})
            _RIDERS.setdefault(run_id, set()).update(riders)
        return done

    monkeypatch.setattr(runs, "checkpoint", recording)
    _WRITTEN.clear()
    _RIDERS.clear()


# Async tools that never suspend: the branches started together end on the same turn of the
# loop, however loaded the machine (a sync tool runs in a thread and may end later).
@agentflow.tool
async def recorded_before(ctx: StepContext, node: str) -> bool:
    """Whether ``node``'s step was checkpointed before this step started."""
    return node in _WRITTEN.get(ctx.run_id, set())


@agentflow.tool
async def follow_up(ctx: StepContext, title: str) -> str:
    """Ask for a task row written in the step's checkpoint."""
    ctx.create_task(title, assignee="owner@example.com")
    return title


def diamond(name: str, left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    """``start`` fans out to ``left`` and ``right``; each has a successor that asks whether its
    branch was recorded; a merge joins them."""
    nodes = [
        {"id": "start", "type": "tool", "tool": "add", "args": {"a": 1, "b": 1}},
        {"id": "left", **left},
        {"id": "right", **right},
        {"id": "after_left", "type": "tool", "tool": "recorded_before", "args": {"node": "left"}},
        {"id": "after_right", "type": "tool", "tool": "recorded_before", "args": {"node": "right"}},
        {"id": "join", "type": "merge"},
        {"id": "done", "type": "finish", "output": "{{ input }}"},
    ]
    pairs = [("start", "left"), ("start", "right"), ("left", "after_left"), ("right", "after_right"),
             ("after_left", "join"), ("after_right", "join"), ("join", "done")]  # fmt: skip
    return {
        "name": name,
        "kind": "structured",
        "nodes": nodes,
        "edges": [{"from": a, "to": b} for a, b in pairs],
    }


async def _transactions(engine: Engine, run_id: UUID) -> dict[str, tuple[str, int]]:
    rows = await engine.db.pool.fetch(
        "SELECT node_id, xmin::text AS tx, seq FROM run_steps WHERE run_id = $1 AND status = 'completed'",
        run_id,
    )
    return {r["node_id"]: (r["tx"], r["seq"]) for r in rows}


async def _finished(engine: Engine, name: str) -> Any:
    run = await engine.start_run(name, {})
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "completed", done.error
    return done


async def test_branches_that_end_together_share_a_commit_and_their_successors_start_after_it(
    engine: Engine, worker: Worker
) -> None:
    echo = {"type": "tool", "tool": "echo"}
    await engine.publish_workflow(
        diamond("shared", {**echo, "args": {"value": "left"}}, {**echo, "args": {"value": "right"}})
    )

    for _ in range(3):
        done = await _finished(engine, "shared")
        assert done.output == {"after_left": True, "after_right": True}  # each saw its branch recorded
        assert {"left", "after_left"} <= _RIDERS[done.id]
        tx = await _transactions(engine, done.id)
        assert tx["left"][0] == tx["right"][0]  # one commit for both branches
        assert tx["after_left"][0] == tx["after_right"][0]  # and for their successors
        assert tx["start"][0] != tx["left"][0] != tx["after_left"][0]
        numbers = [seq for _tx, seq in tx.values()]
        assert sorted(numbers) == list(range(7))  # each of the seven steps its own number
        listed = [s.node_id for s in await engine.list_steps(done.id)]
        assert listed[:1] == ["start"] and listed[-2:] == ["join", "done"], listed


async def test_a_branch_with_writes_of_its_own_is_never_kept_for_another_commit(
    engine: Engine, worker: Worker
) -> None:
    task = {"type": "tool", "tool": "follow_up"}
    await engine.publish_workflow(
        diamond("own_writes", {**task, "args": {"title": "left"}}, {**task, "args": {"title": "right"}})
    )

    done = await _finished(engine, "own_writes")

    assert done.output == {"after_left": True, "after_right": True}
    assert not {"left", "right"} & _RIDERS.get(done.id, set())  # each task's step commits alone
    tx = await _transactions(engine, done.id)
    assert tx["left"][0] != tx["right"][0]
    titles = await engine.db.pool.fetch("SELECT title FROM tasks WHERE run_id = $1 ORDER BY title", done.id)
    assert [r["title"] for r in titles] == ["left", "right"]
