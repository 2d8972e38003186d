"""Runs end to end on a real PostgreSQL: steps, waits, retries, timeouts, cancel, retry."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.core.errors import ConflictError
from agentflow.engine import Engine
from agentflow.runtime.worker import Worker


def flow(name: str, *nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "nodes": list(nodes), **extra}


async def test_three_step_run_completes_with_timeline(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow(
            "sum",
            {"id": "a", "type": "tool", "tool": "add", "args": {"a": "{{ payload.x }}", "b": 2}},
            {"id": "b", "type": "tool", "tool": "echo", "args": {"value": "{{ steps.a * 10 }}"}},
            {"id": "done", "type": "finish", "output": {"total": "{{ steps.b.value }}"}},
        )
    )
    run = await engine.start_run("sum", {"x": 1})
    done = await engine.wait_for_run(run.id, timeout=10)
    assert done.status == "completed"
    assert done.output == {"total": 30}
    steps = await engine.list_steps(run.id)
    assert [(s.seq, s.node_id, s.status, s.attempt) for s in steps] == [
        (0, "a", "completed", 1),
        (1, "b", "completed", 1),
        (2, "done", "completed", 1),
    ]
    assert steps[0].input == {"a": 1, "b": 2} and steps[0].output == 3
    assert steps[0].idempotency_key == f"{run.id}:0"
    assert all(s.finished_at >= s.started_at for s in steps)
    assert done.completed_at is not None and done.due_at is None and done.lease_owner is None
    assert done.fencing_token == 1, "the worker kept its lease across steps: one claim for the run"
    assert {s.fencing_token for s in steps} == {1}


async def test_wait_never_fires_early_and_releases_the_worker(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow(
            "napper",
            {"id": "before", "type": "tool", "tool": "echo", "args": {"value": 1}},
            {"id": "nap", "type": "wait", "duration": "1.5s"},
            {"id": "after", "type": "tool", "tool": "echo", "args": {"value": 2}},
        )
    )
    run = await engine.start_run("napper")
    await asyncio.sleep(0.5)
    mid = await engine.get_run(run.id)
    assert mid.status == "waiting" and mid.status_reason == "timer" and mid.lease_owner is None
    done = await engine.wait_for_run(run.id, timeout=10)
    assert done.status == "completed"
    steps = await engine.list_steps(run.id)
    until = steps[1].finished_at
    woke = steps[2].started_at
    lateness = (woke - until).total_seconds()
    assert lateness >= 1.5, "a wait fired before its time"
    assert lateness < 1.5 + 0.2 + 0.5, f"woke {lateness:.3f}s after the wait began"


async def test_retries_with_backoff_then_succeeds(engine: Engine, worker: Worker) -> None:
    retry = {"max_attempts": 4, "initial_delay": "0.2s", "backoff_factor": 2, "jitter": 0}
    await engine.publish_workflow(
        flow(
            "flaky",
            {
                "id": "f",
                "type": "tool",
                "tool": "flaky",
                "args": {"key": "t1", "fail_times": 2},
                "retry": retry,
            },
        )
    )
    run = await engine.start_run("flaky")
    done = await engine.wait_for_run(run.id, timeout=10)
    assert done.status == "completed", done.error
    steps = await engine.list_steps(run.id)
    assert [(s.attempt, s.status) for s in steps] == [(1, "failed"), (2, "failed"), (3, "completed")]
    assert steps[0].error is not None and steps[0].error["code"] == "step_exception"
    gap1 = (steps[1].started_at - steps[0].finished_at).total_seconds()
    gap2 = (steps[2].started_at - steps[1].finished_at).total_seconds()
    # Never early; late by at most ~a poll. The due time counts from the checkpoint statement's
    # start and finished_at from its end, and started_at is derived from the worker's timing of
    # the step, so the measured gap reads short by as long as a checkpoint statement takes: a
    # couple of milliseconds, 12 on a loaded machine (0.388 for 0.4). A backoff not applied, or
    # one step short, would be 200 ms or more early.
    slack = 0.05
    assert 0.2 - slack <= gap1 < 0.2 + 1.0 and 0.4 - slack <= gap2 < 0.4 + 1.0, (gap1, gap2)


async def test_exhausted_attempts_fail_with_structured_error_then_retry_from_step(
    engine: Engine, worker: Worker
) -> None:
    retry = {"max_attempts": 2, "initial_delay": "0.05s"}
    await engine.publish_workflow(
        flow(
            "doomed",
            {"id": "ok", "type": "tool", "tool": "echo", "args": {"value": "first"}},
            {
                "id": "bad",
                "type": "tool",
                "tool": "flaky",
                "args": {"key": "t2", "fail_times": 2},
                "retry": retry,
            },
        )
    )
    run = await engine.start_run("doomed")
    failed = await engine.wait_for_run(run.id, timeout=10)
    assert failed.status == "failed" and failed.status_reason == "attempts_exhausted"
    assert failed.error is not None
    assert failed.error["code"] == "step_exception"
    assert failed.error["details"]["attempts"] == 2 and failed.error["solution"]
    retried = await engine.retry_run(run.id)
    assert retried.status == "in_progress" and retried.step_seq == 1
    done = await engine.wait_for_run(run.id, timeout=10)
    assert done.status == "completed"
    steps = await engine.list_steps(run.id)
    assert [s.node_id for s in steps if s.status == "completed"] == ["ok", "bad"]
    assert sum(1 for s in steps if s.node_id == "ok") == 1, "retry re-ran a completed step"
    with pytest.raises(ConflictError):
        await engine.retry_run(run.id)


async def test_non_retryable_failure_fails_at_once(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow("fatal", {"id": "x", "type": "tool", "tool": "always_fails", "args": {"retryable": False}})
    )
    run = await engine.start_run("fatal")
    done = await engine.wait_for_run(run.id, timeout=10)
    assert done.status == "failed" and done.status_reason == "upstream_down"
    assert len(await engine.list_steps(run.id)) == 1


async def test_hanging_steps_time_out(engine: Engine, worker: Worker) -> None:
    retry = {"max_attempts": 1}
    await engine.publish_workflow(
        flow(
            "hangs",
            {
                "id": "async_hang",
                "type": "tool",
                "tool": "sleepy",
                "args": {"seconds": 30},
                "timeout": "0.3s",
                "retry": retry,
            },
        )
    )
    await engine.publish_workflow(
        flow(
            "hangs_sync",
            {
                "id": "sync_hang",
                "type": "tool",
                "tool": "blocking_sleep",
                "args": {"seconds": 3},
                "timeout": "0.3s",
                "retry": retry,
            },
        )
    )
    for name in ("hangs", "hangs_sync"):
        run = await engine.start_run(name)
        done = await engine.wait_for_run(run.id, timeout=10)
        assert done.status == "failed" and done.error is not None
        assert done.error["code"] == "step_timeout"
        (step,) = await engine.list_steps(run.id)
        assert 0.3 <= step.duration_ms / 1000 < 1.3


async def test_unstorable_output_fails_cleanly(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(flow("nul", {"id": "x", "type": "tool", "tool": "bad_output"}))
    run = await engine.start_run("nul")
    done = await engine.wait_for_run(run.id, timeout=10)
    assert done.status == "failed" and done.error is not None
    assert done.error["code"] == "output_not_storable"


async def test_cancel_waiting_run_is_immediate(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow("long_nap", {"id": "nap", "type": "wait", "duration": "1h"}, {"id": "x", "type": "finish"})
    )
    run = await engine.start_run("long_nap")
    for _ in range(100):
        if (await engine.get_run(run.id)).status == "waiting":
            break
        await asyncio.sleep(0.05)
    canceled = await engine.cancel_run(run.id)
    assert canceled.status == "canceled" and canceled.due_at is None and canceled.canceled_at is not None
    with pytest.raises(ConflictError):
        await engine.cancel_run(run.id)


async def test_cancel_running_run_stops_at_next_step_boundary(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow(
            "busy",
            {"id": "slow", "type": "tool", "tool": "sleepy", "args": {"seconds": 0.8}},
            {"id": "never", "type": "tool", "tool": "echo", "args": {"value": 1}},
        )
    )
    run = await engine.start_run("busy")
    for _ in range(100):
        if (await engine.get_run(run.id)).lease_owner is not None:
            break
        await asyncio.sleep(0.02)
    requested = await engine.cancel_run(run.id)
    assert requested.status == "in_progress" and requested.cancel_requested
    done = await engine.wait_for_run(run.id, timeout=10)
    assert done.status == "canceled"
    steps = await engine.list_steps(run.id)
    assert [s.node_id for s in steps] == ["slow"], "a step ran after the cancel"


async def test_run_keeps_its_version_while_newer_ones_publish(engine: Engine, worker: Worker) -> None:
    v1 = flow(
        "pinned",
        {"id": "nap", "type": "wait", "duration": "0.8s"},
        {"id": "end", "type": "finish", "output": "v1"},
    )
    first = await engine.publish_workflow(v1)
    runs_v1 = [await engine.start_run("pinned") for _ in range(5)]
    await asyncio.sleep(0.2)
    v2 = {**v1, "nodes": [v1["nodes"][0], {"id": "end", "type": "finish", "output": "v2"}]}
    second = await engine.publish_workflow(v2)
    assert (first.version.version, second.version.version) == (1, 2)
    run_v2 = await engine.start_run("pinned")
    for run in runs_v1:
        done = await engine.wait_for_run(run.id, timeout=10)
        assert (done.workflow_version, done.output) == (1, "v1")
    done = await engine.wait_for_run(run_v2.id, timeout=10)
    assert (done.workflow_version, done.output) == (2, "v2")


async def test_start_unknown_workflow_is_refused_and_an_agent_run_starts_deciding(engine: Engine) -> None:
    from agentflow.core.errors import NotFoundError

    with pytest.raises(NotFoundError):
        await engine.start_run("missing")
    await engine.publish_workflow({"name": "agent1", "kind": "agent", "prompt": "help"})
    run = await engine.start_run("agent1", {"account_id": "acme"})
    assert run.status == "created" and run.state["agent"]["phase"] == "decide"


async def test_heartbeats_keep_the_lease_through_a_step_longer_than_the_ttl(engine: Engine) -> None:
    from tests.conftest import make_settings

    short = Engine(engine.db, make_settings(engine.db.url, lease_ttl=0.6), None)
    w = short.worker(concurrency=2)
    task = asyncio.create_task(w.run())
    try:
        await engine.publish_workflow(
            flow("long_step", {"id": "s", "type": "tool", "tool": "sleepy", "args": {"seconds": 2.0}})
        )
        run = await engine.start_run("long_step")
        done = await engine.wait_for_run(run.id, timeout=15)
    finally:
        w.stop()
        await asyncio.wait_for(task, 10)
    assert done.status == "completed"
    assert (done.rescues, done.fencing_token) == (0, 1), "the lease expired while its worker was alive"
    assert len(await engine.list_steps(run.id)) == 1


async def test_step_outputs_reach_templates_after_a_wait_on_a_fresh_claim(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(
        flow(
            "remembers",
            {"id": "first", "type": "tool", "tool": "echo", "args": {"value": {"items": [1, 2], "n": 5}}},
            {"id": "nap", "type": "wait", "duration": "0.3s"},
            {
                "id": "end",
                "type": "finish",
                "output": {"items": "{{ steps.first.value['items'] }}", "n": "{{ steps.first.value.n + 1 }}"},
            },
        )
    )
    run = await engine.start_run("remembers")
    done = await engine.wait_for_run(run.id, timeout=10)
    assert done.status == "completed", done.error
    assert done.output == {"items": [1, 2], "n": 6}
    assert done.state == {"node": None}, "the run's state holds the cursor, not the outputs"
    assert done.fencing_token == 2, "the wait released the run and a second claim resumed it"


@pytest.mark.parametrize("wait_first", [False, True])
async def test_a_tools_exception_keeps_the_frames_where_it_was_raised(
    engine: Engine, worker: Worker, wait_first: bool
) -> None:
    """The step's error shows the innermost frames of the traceback (where the tool broke),
    however deep the tool's own calls go, whether it failed at once or after waiting."""
    await engine.publish_workflow(
        flow(
            "deep_failure",
            {"id": "deep", "type": "tool", "tool": "fails_deep", "args": {"wait_first": wait_first}},
        )
    )
    run = await engine.start_run("deep_failure")
    failed = await engine.wait_for_run(run.id, timeout=10)
    assert failed.status == "failed" and failed.error is not None
    steps = await engine.list_steps(run.id)
    error = steps[-1].error
    assert error is not None and error["code"] == "step_exception"
    trace = error["details"]["traceback"]
    assert "innermost_helper" in trace and "broken deep inside" in trace, trace
