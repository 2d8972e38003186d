"""Steps of pure nodes (``NodeSpec.pure``: condition, mapping, filter, sort, split, merge) are
written in the same commit as the next step's checkpoint, each still its own row."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.core.node_specs import NODE_SPECS
from agentflow.engine import Engine
from agentflow.runtime.worker import Worker
from tests.integration.test_lifecycle_events import LISTENER, events_of
from tests.support.agents import running_worker, until

PURE = {"condition", "mapping", "filter", "sort", "split", "merge"}

SHAPED = {
    "name": "pure_then_tool",
    "kind": "structured",
    "nodes": [
        {"id": "size", "type": "condition", "branches": [
            {"port": "big", "when": {"path": "payload.n", "op": "gt", "value": 10}}]},
        {"id": "small", "type": "mapping", "output": {"n": "{{ payload.n }}", "doubled": "{{ payload.n * 2 }}"}},
        {"id": "big", "type": "mapping", "output": {"n": "{{ payload.n }}", "doubled": 0}},
        {"id": "sum", "type": "tool", "tool": "add", "args": {"a": "{{ input.n }}", "b": "{{ input.doubled }}"}},
        {"id": "shape", "type": "mapping", "output": {"total": "{{ input }}"}},
        {"id": "done", "type": "finish", "output": "{{ input }}"},
    ],
    "edges": [
        {"from": "size", "port": "default", "to": "small"},
        {"from": "size", "port": "big", "to": "big"},
        {"from": "small", "to": "sum"},
        {"from": "big", "to": "sum"},
        {"from": "sum", "to": "shape"},
        {"from": "shape", "to": "done"},
    ],
}  # fmt: skip


async def step_rows(engine: Engine, run_id: Any) -> list[dict[str, Any]]:
    rows = await engine.db.pool.fetch(
        "SELECT seq, node_id, kind, status, xmin::text AS tx, started_at, finished_at, state, output"
        " FROM run_steps WHERE run_id = $1 ORDER BY seq, attempt",
        run_id,
    )
    return [dict(r) for r in rows]


def test_the_data_and_branching_kinds_are_pure_and_the_acting_ones_are_not() -> None:
    specs = NODE_SPECS
    assert {kind for kind, spec in specs.items() if spec.pure} == PURE
    assert not specs["tool"].pure and not specs["llm"].pure and not specs["wait"].pure


async def test_pure_steps_are_written_in_the_commit_of_the_step_after_them(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(SHAPED)
    run = await engine.start_run("pure_then_tool", {"n": 4})
    done = await engine.wait_for_run(run.id, timeout=15)
    assert done.status == "completed", done.error
    assert done.output == {"total": 12}
    rows = await step_rows(engine, run.id)
    assert [r["node_id"] for r in rows] == ["size", "small", "sum", "shape", "done"]
    assert [r["seq"] for r in rows] == [0, 1, 2, 3, 4], "numbered in order, once each"
    listed = await engine.list_steps(run.id)  # by id, as the API pages them
    assert [s.node_id for s in listed] == ["size", "small", "sum", "shape", "done"]
    assert all(r["status"] == "completed" for r in rows)
    tx = {r["node_id"]: r["tx"] for r in rows}
    # size and small (pure) share sum's transaction; shape (pure) shares done's; the tool's
    # checkpoint is a commit of its own.
    assert tx["size"] == tx["small"] == tx["sum"]
    assert tx["shape"] == tx["done"] != tx["sum"]
    # Each row keeps the state its step left and its own times, in the order the steps ran.
    assert rows[1]["output"] == {"n": 4, "doubled": 8}
    assert rows[0]["state"] != rows[1]["state"] != rows[2]["state"]
    for earlier, later in itertools.pairwise(rows):
        assert earlier["started_at"] <= earlier["finished_at"] <= later["started_at"]


async def test_steps_that_act_each_commit_on_their_own(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        {
            "name": "tools_only",
            "kind": "structured",
            "nodes": [
                {"id": "a", "type": "tool", "tool": "add", "args": {"a": 1, "b": 2}},
                {"id": "b", "type": "tool", "tool": "add", "args": {"a": "{{ input }}", "b": 2}},
                {"id": "done", "type": "finish", "output": "{{ input }}"},
            ],
        }
    )
    run = await engine.start_run("tools_only")
    done = await engine.wait_for_run(run.id, timeout=15)
    assert done.status == "completed" and done.output == 5
    rows = await step_rows(engine, run.id)
    assert len({r["tx"] for r in rows}) == len(rows) == 3


async def test_a_pure_step_before_a_failed_attempt_is_written_with_it_and_not_run_again(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(
        {
            "name": "pure_then_flaky",
            "kind": "structured",
            "retry": {"max_attempts": 3, "initial_delay": "0s", "jitter": 0},
            "nodes": [
                {"id": "prep", "type": "mapping", "output": {"key": "pure-{{ payload.k }}", "times": 2}},
                {"id": "flaky", "type": "tool", "tool": "flaky", "args": {"key": "{{ input.key }}",
                                                                          "fail_times": "{{ input.times }}"}},
                {"id": "done", "type": "finish", "output": "{{ input }}"},
            ],
        }
    )  # fmt: skip
    run = await engine.start_run("pure_then_flaky", {"k": str(uuid.uuid4())})
    done = await engine.wait_for_run(run.id, timeout=15)
    assert done.status == "completed", done.error
    rows = await step_rows(engine, run.id)
    assert [(r["node_id"], r["status"]) for r in rows] == [
        ("prep", "completed"), ("flaky", "failed"), ("flaky", "failed"), ("flaky", "completed"), ("done", "completed"),
    ]  # fmt: skip
    assert rows[0]["tx"] == rows[1]["tx"], "written with the first failed attempt"
    assert [r["seq"] for r in rows] == [0, 1, 1, 1, 2]


@pytest.mark.parametrize("n", [4, 40])
async def test_either_branch_of_a_condition_reaches_the_tool(engine: Engine, worker: Worker, n: int) -> None:
    await engine.publish_workflow(SHAPED)
    run = await engine.start_run("pure_then_tool", {"n": n})
    done = await engine.wait_for_run(run.id, timeout=15)
    assert done.status == "completed", done.error
    assert done.output == {"total": 12 if n == 4 else 40}


async def test_a_run_whose_first_steps_are_pure_still_tells_its_start_once(engine: Engine) -> None:
    await engine.publish_workflow(LISTENER)
    await engine.publish_workflow(SHAPED)
    async with running_worker(engine):
        run = await engine.start_run("pure_then_tool", {"n": 4})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed"
    told = await events_of(engine, run.id)
    assert [topic for topic, _, _ in told] == ["run.started", "run.completed"]


AFTER_PURE = {
    "task": {"id": "then", "type": "tool", "tool": "make_task", "args": {"title": "for {{ input.who }}"}},
    "wait": {"id": "then", "type": "wait", "duration": "0.2s"},
    "loop": {"id": "then", "type": "for_each", "items": "{{ input.items }}", "concurrency": 2},
}


@pytest.mark.parametrize("kind", sorted(AFTER_PURE))
async def test_a_pure_step_rides_in_a_checkpoint_that_writes_more(
    engine: Engine, worker: Worker, kind: str
) -> None:
    """The step after the pure one creates a task, starts a timer, or fans out child runs: the
    pure step's row goes in that checkpoint all the same, and the run completes."""
    nodes: list[dict[str, Any]] = [
        {"id": "prep", "type": "mapping", "output": {"who": "{{ payload.who }}", "items": [1, 2, 3]}},
        AFTER_PURE[kind],
        {"id": "done", "type": "finish", "output": "{{ steps.prep.who }}"},
    ]
    edges = [{"from": "prep", "to": "then"}, {"from": "then", "port": "done" if kind == "loop" else "result",
                                              "to": "done"}]  # fmt: skip
    if kind == "loop":
        nodes.append({"id": "item", "type": "tool", "tool": "add", "args": {"a": "{{ input }}", "b": 1}})
        edges.append({"from": "then", "port": "iteration", "to": "item"})
    await engine.publish_workflow(
        {"name": f"pure_then_{kind}", "kind": "structured", "nodes": nodes, "edges": edges}
    )
    run = await engine.start_run(f"pure_then_{kind}", {"who": "Ann"})
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "completed", done.error
    assert done.output == "Ann"
    rows = await step_rows(engine, run.id)
    assert rows[0]["node_id"] == "prep" and rows[0]["tx"] == rows[1]["tx"] and rows[1]["node_id"] == "then"
    if kind == "task":
        titles = await engine.db.pool.fetch("SELECT title FROM tasks WHERE run_id = $1", run.id)
        assert [t["title"] for t in titles] == ["for Ann"]
    if kind == "loop":
        children = await engine.db.pool.fetchval("SELECT count(*) FROM runs WHERE parent_run_id = $1", run.id)
        assert children == 3


async def test_a_join_with_nothing_else_running_rides_in_the_next_checkpoint_of_a_graph_that_fans_out(
    engine: Engine, worker: Worker
) -> None:
    """Branches run at once (the branch driver): the merge, ending when both branches have,
    is written with the step after it, not with the branches."""
    add = {"type": "tool", "tool": "add"}
    await engine.publish_workflow(
        {
            "name": "pure_diamond",
            "kind": "structured",
            "nodes": [
                {"id": "start", **add, "args": {"a": 1, "b": 1}},
                {"id": "left", **add, "args": {"a": "{{ input }}", "b": 10}},
                {"id": "right", **add, "args": {"a": "{{ input }}", "b": 100}},
                {"id": "join", "type": "merge"},
                {"id": "after", **add, "args": {"a": "{{ input.left }}", "b": "{{ input.right }}"}},
                {"id": "done", "type": "finish", "output": "{{ input }}"},
            ],
            "edges": [
                {"from": "start", "to": "left"}, {"from": "start", "to": "right"},
                {"from": "left", "to": "join"}, {"from": "right", "to": "join"},
                {"from": "join", "to": "after"}, {"from": "after", "to": "done"},
            ],
        }
    )  # fmt: skip
    run = await engine.start_run("pure_diamond")
    done = await engine.wait_for_run(run.id, timeout=15)
    assert done.status == "completed", done.error
    assert done.output == 114
    rows = await step_rows(engine, run.id)
    tx = {r["node_id"]: r["tx"] for r in rows}
    assert tx["join"] == tx["after"]
    # (the branches share a commit when they end together: test_branches_sharing_commits)
    assert len({tx["start"], tx["left"], tx["after"]}) == 3
    assert tx["right"] not in (tx["start"], tx["after"])
    listed = [s.node_id for s in await engine.list_steps(run.id)]
    assert listed.index("join") == listed.index("after") - 1, listed
