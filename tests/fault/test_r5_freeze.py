"""R5: a worker frozen (SIGSTOP) past its lease, then resumed: 0 stale writes accepted."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

import asyncpg
import pytest

from agentflow.engine import DEFAULT_WORKSPACE, Engine
from agentflow.store import runs
from tests.support.processes import WorkerProcess, worker_env
from tests.support.recording_server import RecordingServer

pytestmark = pytest.mark.fault

LEASE_TTL = 2.0


async def stale_writes(pool: asyncpg.Pool, run_id: UUID, stale_token: int) -> int:
    """Step rows written under ``stale_token`` or older: each is a stale write accepted."""
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM run_steps WHERE run_id = $1 AND fencing_token <= $2", run_id, stale_token
        )
    )


async def until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.mark.timeout(90)
async def test_r5_frozen_worker_cannot_write_after_its_run_was_rescued(
    engine: Engine, recorder: RecordingServer, log_dir: Path
) -> None:
    await engine.publish_workflow(
        {
            "name": "frozen",
            "kind": "structured",
            "nodes": [
                {"id": "slow", "type": "tool", "tool": "slow_fenced", "args": {"seconds": 1.5}},
                {"id": "after", "type": "tool", "tool": "echo", "args": {"value": "{{ steps.slow.token }}"}},
                {"id": "done", "type": "finish", "output": "{{ steps.slow }}"},
            ],
        }
    )
    env = worker_env(
        engine.db.url, recorder.url, measured=True, lease_ttl=LEASE_TTL, poll_interval=0.2, max_rescues=3
    )
    frozen = WorkerProcess("r5-frozen", env, log_dir, concurrency=1)
    rescuer: WorkerProcess | None = None
    try:
        await asyncio.to_thread(frozen.wait_ready)
        run = await engine.start_run("frozen")

        def started_by(pid: int) -> list[dict[str, object]]:
            return [c.body for c in recorder.calls("/fenced-start") if c.body["pid"] == pid]

        await until(lambda: started_by(frozen.pid), 15, "the first attempt to start")
        # Freeze it inside its 1.5 s sleep, not before it: frozen between the recorder's answer
        # and the sleep, the resumed worker would sleep again while its heartbeat found the
        # lease gone and cancelled the step before its write (seen on a loaded machine).
        await asyncio.sleep(0.4)
        frozen.freeze()
        frozen_at = time.monotonic()
        stale_token = int(started_by(frozen.pid)[0]["fencing_token"])  # type: ignore[call-overload]

        rescuer = WorkerProcess("r5-rescuer", env, log_dir, concurrency=1)
        done = await engine.wait_for_run(run.id, timeout=30)
        frozen_for = time.monotonic() - frozen_at
        assert done.status == "completed", (done.status, done.error)
        assert frozen_for > LEASE_TTL, "the worker was not frozen past its lease"

        frozen.resume()
        # The resumed worker finishes its step: its write to the fencing-aware receiver is
        # refused, then it notices it lost the lease (its checkpoint is fenced off, or its
        # heartbeat finds the lease gone first).
        await until(lambda: recorder.calls("/fenced/write") and any(
            c.body["pid"] == frozen.pid for c in recorder.calls("/fenced/write")), 15, "the stale write")  # fmt: skip
        # Synchronise on the worker's log when it says so; the verdict below does not rely
        # on the log, only on what the database and the receiver recorded.
        with contextlib.suppress(AssertionError):
            await until(lambda: "lease lost" in frozen.stderr(), 5, "the frozen worker to notice")
        await asyncio.sleep(0.5)  # time for any (wrong) late write to land
        assert frozen.alive(), frozen.stderr()[-2000:]

        steps = await engine.list_steps(run.id)
        after = await engine.get_run(run.id)
        writes = recorder.calls("/fenced/write")
        starts = recorder.calls("/fenced-start")
        log = frozen.stderr()
        checkpoint_path = (
            "its checkpoint was fenced off"
            if "checkpoint of step 0 discarded" in log
            else "its heartbeat found the lease gone"
            if "lease lost" in log
            else "(not in its log)"
        )
        print(
            f"\nR5: frozen {frozen_for:.2f}s; stale token {stale_token}; rescued token"
            f" {steps[0].fencing_token}; stale holder stopped by: {checkpoint_path};"
            f" receiver answers {[((c.body['pid'] == frozen.pid and 'stale') or 'rescuer', c.status) for c in writes]}"
        )

        # 0 stale writes accepted: nothing in run_steps under the old token, one completed
        # row per seq, the rescuer's token on each, the run unchanged by the resumed worker.
        assert await stale_writes(engine.db.pool, run.id, stale_token) == 0
        assert [(s.seq, s.status) for s in steps] == [(0, "completed"), (1, "completed"), (2, "completed")]
        assert all(s.fencing_token > stale_token and s.worker == "r5-rescuer" for s in steps)
        assert after.status == "completed" and after.updated_at == done.updated_at
        assert after.output == {"accepted": True, "token": steps[0].fencing_token}
        assert await engine.db.pool.fetchval("SELECT count(*) FROM run_steps WHERE worker = 'r5-frozen'") == 0
        # The recorder saw both attempts; the fencing-aware receiver accepted the rescuer's
        # write and refused the stale one that came after it.
        assert [c.body["pid"] for c in starts] == [frozen.pid, rescuer.pid]
        assert [(c.body["pid"], c.status) for c in writes] == [(rescuer.pid, 200), (frozen.pid, 409)]
        assert all(c.key == f"{run.id}:0" for c in starts + writes)
    finally:
        frozen.stop()
        if rescuer is not None:
            rescuer.stop()


async def test_r5_negative_control_stale_token_is_refused_and_current_token_accepted(engine: Engine) -> None:
    """Fenced writes called directly: the old holder's token is refused, the new one's is not;
    and the stale-write detector above does find a write made without the fence."""
    await engine.publish_workflow(
        {
            "name": "fence",
            "kind": "structured",
            "nodes": [
                {"id": "a", "type": "tool", "tool": "echo", "args": {"value": 1}},
                {"id": "done", "type": "finish"},
            ],
        }
    )
    run = await engine.start_run("fence")
    pool = engine.db.pool
    (old,) = await runs.claim(pool, "old-holder", 1, 0.3, 3)
    await asyncio.sleep(0.5)  # the old holder's lease expires (database clock)
    (new,) = await runs.claim(pool, "new-holder", 1, 30.0, 3)
    assert new.run.id == run.id and new.rescued and new.run.fencing_token == old.run.fencing_token + 1

    state = {"node": "done", "steps": {"a": {"value": 1}}}
    move = runs.RunWrite("in_progress", None, state, None, None, True)
    step = runs.StepWrite(0, 1, "a", "tool", "echo", "completed", {"value": 1}, {"value": 1}, None, 0.01)
    task = [{"title": "written once"}]
    ws = DEFAULT_WORKSPACE
    stale = old.run.fencing_token

    assert (
        await runs.checkpoint(
            pool, ws, run.id, stale, "old-holder", run=move, step=step, effects=runs.Effects(tasks=task)
        )
        is None
    )
    assert (
        await runs.checkpoint(
            pool, ws, run.id, stale, "new-holder", run=move, step=step, effects=runs.Effects(tasks=task)
        )
        is None
    )
    assert await runs.heartbeat(pool, "old-holder", [(ws, run.id, stale)], 30.0) == set()
    assert await runs.release(pool, ws, run.id, stale, "old-holder") is False
    assert await runs.finish_cancel(pool, ws, run.id, stale, "old-holder") is False
    unchanged = await engine.get_run(run.id)
    assert (unchanged.step_seq, unchanged.lease_owner) == (0, "new-holder")
    assert await pool.fetchval("SELECT count(*) FROM tasks") == 0
    assert await stale_writes(pool, run.id, stale) == 0

    current = await runs.checkpoint(
        pool,
        ws,
        run.id,
        new.run.fencing_token,
        "new-holder",
        run=move,
        step=step,
        effects=runs.Effects(tasks=task),
    )
    assert current is not None and current.status == "in_progress"
    (row,) = await engine.list_steps(run.id)
    assert row.fencing_token == new.run.fencing_token and row.worker == "new-holder"
    assert await pool.fetchval("SELECT count(*) FROM tasks WHERE run_id = $1", run.id) == 1
    # A replay of the accepted checkpoint is refused too (step_seq moved on).
    again = await runs.checkpoint(
        pool,
        ws,
        run.id,
        new.run.fencing_token,
        "new-holder",
        run=move,
        step=step,
        effects=runs.Effects(tasks=task),
    )
    assert again is None

    # The detector can fail: a write that skipped the fence (what the stale holder would
    # have done without it) is counted.
    await pool.execute(
        "INSERT INTO run_steps (workspace_id, run_id, seq, attempt, kind, status, idempotency_key,"
        " worker, fencing_token, started_at, finished_at)"
        " VALUES ($1, $2, 0, 1, 'tool', 'failed', $3, 'old-holder', $4, now(), now())",
        ws,
        run.id,
        f"{run.id}:0",
        stale,
    )
    assert await stale_writes(pool, run.id, stale) == 1
