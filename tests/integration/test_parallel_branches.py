"""Branches of one run running at once, on the real database: the per-run limit, step
numbers that stay unique and stable, a failed attempt that retries on its own while the other
branches go on, a wait released while a branch runs, a retried run that keeps the branches
that completed, and a worker that stops with branches running."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

import agentflow
import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow import StepContext
from agentflow.engine import Engine
from agentflow.runtime.worker import Worker

_INSIDE: dict[str, int] = {}
_PEAK: dict[str, int] = {}
_CALLS: dict[str, int] = {}
_MARKS: dict[str, asyncio.Event] = {}


@agentflow.tool
async def rendezvous(ctx: StepContext, group: str, expect: int, wait: float) -> dict[str, Any]:
    """Wait until ``expect`` steps of ``group`` are inside at once (or ``wait`` seconds)."""
    _INSIDE[group] = _INSIDE.get(group, 0) + 1
    _PEAK[group] = max(_PEAK.get(group, 0), _INSIDE[group])
    try:
        deadline = asyncio.get_running_loop().time() + wait
        while _PEAK[group] < expect and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        return {"met": _PEAK[group] >= expect, "key": ctx.idempotency_key}
    finally:
        _INSIDE[group] -= 1


@agentflow.tool
async def counted(key: str, fail_first: int = 0, pause: float = 0.0) -> dict[str, int]:
    """Count calls for ``key``; fail the first ``fail_first`` (after ``pause`` seconds)."""
    _CALLS[key] = _CALLS.get(key, 0) + 1
    await asyncio.sleep(pause)
    if _CALLS[key] <= fail_first:
        raise RuntimeError(f"call {_CALLS[key]} of {key} fails")
    return {"calls": _CALLS[key]}


@agentflow.tool
async def await_calls(key: str, calls: int, wait: float) -> dict[str, bool]:
    """Wait until ``key`` was called ``calls`` times (or ``wait`` seconds)."""
    deadline = asyncio.get_running_loop().time() + wait
    while _CALLS.get(key, 0) < calls and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    return {"saw": _CALLS.get(key, 0) >= calls}


def fan_out(name: str, branches: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """``start`` fans out to ``branches``, a merge joins them, a finish returns the join."""
    nodes = [{"id": "start", "type": "tool", "tool": "echo", "args": {"value": "{{ payload }}"}}]
    edges: list[dict[str, str]] = []
    for branch in branches:
        nodes.append(branch)
        edges += [{"from": "start", "to": branch["id"]}, {"from": branch["id"], "to": "join"}]
    nodes += [{"id": "join", "type": "merge"}, {"id": "done", "type": "finish", "output": "{{ input }}"}]
    edges.append({"from": "join", "to": "done"})
    return {"name": name, "kind": "structured", "nodes": nodes, "edges": edges, **extra}


def meet(node_id: str, group: str, expect: int, wait: float) -> dict[str, Any]:
    args = {"group": group, "expect": expect, "wait": wait}
    return {"id": node_id, "type": "tool", "tool": "rendezvous", "args": args}


async def finished(engine: Engine, name: str, status: str = "completed") -> Any:
    run = await engine.start_run(name, {})
    done = await engine.wait_for_run(run.id, timeout=60)
    assert done.status == status, done.error
    return done


async def test_branches_run_at_once_with_stable_unique_step_numbers(engine: Engine, worker: Worker) -> None:
    group = uuid.uuid4().hex
    await engine.publish_workflow(fan_out("at-once", [meet(f"b{i}", group, 3, 30.0) for i in range(3)]))
    done = await finished(engine, "at-once")
    assert {branch: out["met"] for branch, out in done.output.items()} == {"b0": True, "b1": True, "b2": True}
    steps = await engine.list_steps(done.id)
    assert sorted(s.seq for s in steps) == list(range(6)), "numbers are unique and leave no gap"
    for s in steps:
        assert s.idempotency_key == f"{done.id}:{s.seq}"
        if s.node_id in done.output:  # what the tool saw is what the step records
            assert done.output[s.node_id]["key"] == s.idempotency_key


async def test_negative_control_max_parallel_1_takes_turns(engine: Engine, worker: Worker) -> None:
    group = uuid.uuid4().hex
    flow = fan_out("in-turn", [meet(f"b{i}", group, 2, 0.5) for i in range(2)], max_parallel=1)
    await engine.publish_workflow(flow)
    done = await finished(engine, "in-turn")
    assert [out["met"] for out in done.output.values()] == [False, False]


async def test_no_more_than_max_parallel_run_at_once(engine: Engine, worker: Worker) -> None:
    group = uuid.uuid4().hex
    flow = fan_out("limited", [meet(f"b{i}", group, 3, 30.0) for i in range(6)], max_parallel=3)
    await engine.publish_workflow(flow)
    done = await finished(engine, "limited")
    assert all(out["met"] for out in done.output.values())
    assert _PEAK[group] == 3


async def test_a_failed_attempt_retries_on_its_own_while_another_branch_runs(
    engine: Engine, worker: Worker
) -> None:
    key = uuid.uuid4().hex
    flaky = {"id": "flaky", "type": "tool", "tool": "counted", "args": {"key": key, "fail_first": 1},
             "retry": {"max_attempts": 3, "initial_delay": "0.2s", "jitter": 0}}  # fmt: skip
    # This branch ends only once the flaky one ran again: the retry did not wait for it.
    patient = {
        "id": "patient",
        "type": "tool",
        "tool": "await_calls",
        "args": {"key": key, "calls": 2, "wait": 30},
    }
    await engine.publish_workflow(fan_out("retry-beside", [flaky, patient]))
    done = await finished(engine, "retry-beside")
    assert done.output == {"flaky": {"calls": 2}, "patient": {"saw": True}}
    attempts = [
        (s.seq, s.attempt, s.status) for s in await engine.list_steps(done.id) if s.node_id == "flaky"
    ]
    assert [(a, status) for _, a, status in attempts] == [(1, "failed"), (2, "completed")]
    assert attempts[0][0] == attempts[1][0], "a retry keeps its step number (and idempotency key)"


async def test_a_wait_on_one_branch_ends_while_another_branch_runs(engine: Engine, worker: Worker) -> None:
    key = uuid.uuid4().hex
    flow = fan_out(
        "wait-beside",
        [
            {"id": "nap", "type": "wait", "duration": "0.3s", "next": "after_nap"},
            {
                "id": "busy",
                "type": "tool",
                "tool": "await_calls",
                "args": {"key": key, "calls": 1, "wait": 30},
            },
        ],
    )
    flow["nodes"].append({"id": "after_nap", "type": "tool", "tool": "counted", "args": {"key": key}})
    flow["edges"] = [e for e in flow["edges"] if e != {"from": "nap", "to": "join"}]
    flow["edges"].append({"from": "after_nap", "to": "join"})
    await engine.publish_workflow(flow)
    done = await finished(engine, "wait-beside")
    assert done.output == {"busy": {"saw": True}, "after_nap": {"calls": 1}}


async def test_a_retried_run_keeps_the_branches_that_completed(engine: Engine, worker: Worker) -> None:
    fails, steady = uuid.uuid4().hex, uuid.uuid4().hex
    failing = {"id": "failing", "type": "tool", "tool": "counted",
               "args": {"key": fails, "fail_first": 2, "pause": 0.2}, "retry": {"max_attempts": 2, "initial_delay": "0.1s"}}  # fmt: skip
    plain = {"id": "plain", "type": "tool", "tool": "counted", "args": {"key": steady}}
    await engine.publish_workflow(fan_out("retry-keeps", [failing, plain]))
    failed = await finished(engine, "retry-keeps", "failed")
    assert failed.error["code"] == "step_exception"
    first = [s for s in await engine.list_steps(failed.id) if s.node_id == "failing"]
    await engine.retry_run(failed.id)
    done = await engine.wait_for_run(failed.id, timeout=60)
    assert done.status == "completed", done.error
    assert done.output == {"failing": {"calls": 3}, "plain": {"calls": 1}}, "plain did not run again"
    again = [s for s in await engine.list_steps(done.id) if s.node_id == "failing"]
    assert {s.seq for s in again} == {first[0].seq}
    assert [s.attempt for s in again if s.status == "completed"] == [1], "a fresh attempt budget"


FOR_EACH_BESIDE = {
    "name": "loop-beside",
    "kind": "structured",
    "nodes": [
        {"id": "start", "type": "tool", "tool": "echo", "args": {"value": [1, 2, 3]}},
        {"id": "each", "type": "for_each", "items": "{{ input.value }}", "concurrency": 2},
        {"id": "body", "type": "tool", "tool": "add", "args": {"a": "{{ input }}", "b": 10}},
        {"id": "plain", "type": "tool", "tool": "echo", "args": {"value": "side"}},
        {"id": "join", "type": "merge"},
        {"id": "done", "type": "finish", "output": "{{ input }}"},
    ],
    "edges": [
        {"from": "start", "to": "each"},
        {"from": "start", "to": "plain"},
        {"from": "each", "port": "iteration", "to": "body"},
        {"from": "each", "port": "done", "to": "join"},
        {"from": "plain", "to": "join"},
        {"from": "join", "to": "done"},
    ],
}


async def test_a_loop_on_one_branch_joins_with_the_others(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(FOR_EACH_BESIDE)
    done = await finished(engine, "loop-beside")
    assert done.output == {"each": [11, 12, 13], "plain": {"value": "side"}}


@pytest.mark.timeout(60)
async def test_a_stopping_worker_checkpoints_its_running_branches_then_hands_the_run_back(
    engine: Engine,
) -> None:
    key = uuid.uuid4().hex
    slow = [{"id": f"b{i}", "type": "tool", "tool": "counted", "args": {"key": f"{key}{i}", "pause": 0.5}}
            for i in range(2)]  # fmt: skip
    flow = fan_out("stop-beside", slow)
    flow["nodes"].append({"id": "later", "type": "tool", "tool": "echo", "args": {"value": 1}})
    flow["edges"] = [e for e in flow["edges"] if e != {"from": "join", "to": "done"}]
    flow["edges"] += [{"from": "join", "to": "later"}, {"from": "later", "to": "done"}]
    await engine.publish_workflow(flow)
    first = engine.worker(concurrency=2, dispatch=False)
    running = asyncio.create_task(first.run())
    run = await engine.start_run("stop-beside", {})
    while _CALLS.get(f"{key}0", 0) + _CALLS.get(f"{key}1", 0) < 2:
        await asyncio.sleep(0.01)
    first.stop()
    await asyncio.wait_for(running, 20)
    held = await engine.get_run(run.id)
    assert held.status == "in_progress" and held.lease_owner is None, "handed back, not held"
    assert {s.node_id for s in await engine.list_steps(run.id)} == {"start", "b0", "b1"}
    second = engine.worker(concurrency=2, dispatch=False)
    resumed = asyncio.create_task(second.run())
    try:
        done = await engine.wait_for_run(run.id, timeout=30)
    finally:
        second.stop()
        await asyncio.wait_for(resumed, 20)
    assert done.status == "completed", done.error
    assert (_CALLS[f"{key}0"], _CALLS[f"{key}1"]) == (1, 1), "the branches that ran were not run again"
