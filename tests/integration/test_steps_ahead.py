"""Steps written ahead of their run's row (``store.steps_ahead``), on the real database.

A step that only moves its run on is written as its row alone, fenced on the lease and on the
counter the run's row holds, and holding that row (``FOR KEY SHARE``) until it commits. The
run's row lags meanwhile: a claim, ``Engine.get_run`` and any end of the run that is not the
worker's own checkpoint (a trigger, migration 0039) catch it up from the steps.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from agentflow.bench.context import chain
from agentflow.bench.tools import NOOP
from agentflow.core.run_filters import RunFilter
from agentflow.engine import Engine
from agentflow.runtime import pure_steps, worker
from agentflow.store import claims, migrations, runs, steps_ahead
from agentflow.store.checkpoints import RunWrite, StepWrite
from tests.support.agents import running_worker

OWNER, OTHER = "ahead-worker", "other-worker"


def _step(seq: int) -> StepWrite:
    return StepWrite(seq, 0, f"s{seq}", "tool", NOOP, "completed", {}, {"seq": seq}, None, 0.001)


async def _held_after_one_step(engine: Engine) -> tuple[UUID, UUID, int]:
    """A run of the chain claimed by ``OWNER``, its step 0 checkpointed in full (state x=0)."""
    await engine.publish_workflow(chain("ahead", 6))
    started = await engine.start_run("ahead")
    [claimed] = await runs.claim(engine.db.pool, OWNER, 1, 30.0, 3)
    run = claimed.run
    moved = RunWrite("in_progress", None, {"x": 0}, None, None, advance=True)
    assert await runs.checkpoint(
        engine.db.pool, run.workspace_id, run.id, run.fencing_token, OWNER, moved, _step(0)
    )
    return run.workspace_id, started.id, run.fencing_token


async def _write(
    engine: Engine, ws: UUID, run_id: UUID, token: int, counter: int, seq: int, owner: str = OWNER
) -> Any:
    return await steps_ahead.write_ahead(
        engine.db.pool, ws, run_id, token, owner, counter, _step(seq), {"x": seq}
    )


async def _row(engine: Engine, run_id: UUID) -> asyncpg.Record:
    row = await engine.db.pool.fetchrow(
        "SELECT step_seq, state, status, fencing_token FROM runs WHERE id = $1", run_id
    )
    assert row is not None
    return row


async def _expire(engine: Engine, run_id: UUID) -> None:
    await engine.db.pool.execute(
        "UPDATE runs SET lease_expires_at = now() - interval '1 s', due_at = now() - interval '1 s' WHERE id = $1",
        run_id,
    )


async def test_a_step_written_ahead_leaves_the_row_behind_and_readers_catch_up(engine: Engine) -> None:
    ws, run_id, token = await _held_after_one_step(engine)

    done = await _write(engine, ws, run_id, token, 1, 1)
    assert done is not None and done.status == "in_progress" and not done.cancel_requested
    assert await _write(engine, ws, run_id, token, 1, 2) is not None

    row = await _row(engine, run_id)
    assert (row["step_seq"], row["state"]) == (1, {"x": 0}), "the run's row keeps its last full checkpoint"
    seen = await engine.get_run(run_id)
    assert (seen.step_seq, seen.state) == (3, {"x": 2}), "a reader sees where the steps took the run"
    assert [s.seq for s in await engine.list_steps(run_id)] == [0, 1, 2]
    idle = await engine.start_run("ahead")  # not in progress: as its row says
    listed = {r.id: r for r in await engine.list_runs(workflow="ahead")}
    assert (listed[run_id].step_seq, listed[run_id].state) == (3, {"x": 2}), "lists too"
    assert (listed[idle.id].step_seq, listed[idle.id].status.value) == (0, "created")
    [searched] = await engine.search_runs(RunFilter(exact={"status": "in_progress"}))
    assert (searched.step_seq, searched.state) == (3, {"x": 2}), "and searches"


async def test_a_step_ahead_is_fenced_on_the_lease_and_on_the_rows_counter(engine: Engine) -> None:
    ws, run_id, token = await _held_after_one_step(engine)

    assert await _write(engine, ws, run_id, token, 2, 1) is None, "another counter than the row's"
    assert await _write(engine, ws, run_id, token + 1, 1, 1) is None, "another lease's token"
    assert await _write(engine, ws, run_id, token, 1, 1, owner=OTHER) is None, "another owner"
    assert [s.seq for s in await engine.list_steps(run_id)] == [0], "nothing written"


async def test_a_claim_waits_for_a_step_ahead_then_fences_its_writer_off(engine: Engine) -> None:
    ws, run_id, token = await _held_after_one_step(engine)
    await _write(engine, ws, run_id, token, 1, 1)
    await _expire(engine, run_id)

    async with engine.db.pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        assert (
            await steps_ahead.write_ahead(conn, ws, run_id, token, OWNER, 1, _step(2), {"x": 2}) is not None
        )
        # The uncommitted step holds the run's row: a claim skips it rather than take the run
        # from under it (it would not see the step, and run it again).
        assert await runs.claim(engine.db.pool, OTHER, 1, 30.0, 3) == []
        await transaction.commit()

    [claimed] = await runs.claim(engine.db.pool, OTHER, 1, 30.0, 3)
    assert claimed.rescued and claimed.run.fencing_token == token + 1
    caught = await steps_ahead.caught_up(engine.db.pool, claimed.run)
    assert (caught.step_seq, caught.state) == (3, {"x": 2}), "the claim sees both steps written ahead"
    assert await _write(engine, ws, run_id, token, 1, 3) is None, "the lost worker writes nothing now"
    assert [s.seq for s in await engine.list_steps(run_id)] == [0, 1, 2]


@pytest.mark.parametrize("trigger", [True, False])
async def test_a_run_that_ends_outside_its_workers_checkpoint_is_caught_up(
    engine: Engine, trigger: bool
) -> None:
    ws, run_id, token = await _held_after_one_step(engine)
    await _write(engine, ws, run_id, token, 1, 1)
    if not trigger:  # negative control: without migration 0039's trigger the row keeps lagging
        await engine.db.pool.execute("ALTER TABLE runs DISABLE TRIGGER run_steps_caught_up")

    await engine.db.pool.execute("UPDATE runs SET cancel_requested = true WHERE id = $1", run_id)
    assert await runs.finish_cancel(engine.db.pool, ws, run_id, token, OWNER)

    row = await _row(engine, run_id)
    assert row["status"] == "canceled"
    if trigger:
        assert (row["step_seq"], row["state"]) == (2, {"x": 1})
    else:
        assert (row["step_seq"], row["state"]) == (1, {"x": 0})


async def test_a_lost_run_the_claim_fails_keeps_the_state_its_steps_reached(engine: Engine) -> None:
    ws, run_id, token = await _held_after_one_step(engine)
    await runs.begin(engine.db.pool, ws, run_id, token, OWNER)
    await _write(engine, ws, run_id, token, 1, 1)
    await engine.db.pool.execute("UPDATE runs SET rescues = 3 WHERE id = $1", run_id)
    await _expire(engine, run_id)

    [claimed] = await runs.claim(engine.db.pool, OTHER, 1, 30.0, 3)

    assert claimed.run.status.value == "failed" and claimed.run.status_reason == "worker_lost"
    assert (claimed.run.step_seq, claimed.run.state) == (2, {"x": 1})
    assert claimed.run.error is not None
    assert claimed.run.error["message"].startswith("the worker running step 2 was lost"), claimed.run.error


def _watch_steps_ahead(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """Each step written ahead, as (step, the row's counter, what get_run says)."""
    monkeypatch.setattr(pure_steps, "AHEAD_SECS", 60.0)  # a loaded machine must not end the stretch
    real = steps_ahead.write_ahead
    lags: list[tuple[int, int, int]] = []

    async def watched(*args: Any) -> Any:
        done = await real(*args)
        run_id, step = args[2], args[6]
        lags.append(
            (step.seq, (await _row(engine, run_id))["step_seq"], (await engine.get_run(run_id)).step_seq)
        )
        return done

    monkeypatch.setattr(worker.steps_ahead, "write_ahead", watched)
    return lags


async def test_a_chain_writes_its_steps_ahead_and_completes_with_each_step_once(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    lags = _watch_steps_ahead(engine, monkeypatch)
    await engine.publish_workflow(chain("ahead_chain", 12))
    async with running_worker(engine, dispatch=False):
        run = await engine.start_run("ahead_chain")
        done = await engine.wait_for_run(run.id, timeout=30)

    assert done.status.value == "completed" and done.step_seq == 12
    # From the first step (a new run's row is current at its claim, with no rescue counts to
    # reset); the last (it ends the run) in full.
    assert lags == [(seq, 0, seq + 1) for seq in range(11)]
    assert [s.seq for s in await engine.list_steps(run.id)] == list(range(12))


async def test_a_rescued_run_writes_its_first_step_in_full_to_reset_its_rescue_counts(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    lags = _watch_steps_ahead(engine, monkeypatch)
    await engine.publish_workflow(chain("ahead_rescued", 12))
    run = await engine.start_run("ahead_rescued")
    [lost] = await runs.claim(engine.db.pool, OTHER, 1, 30.0, 3)  # its worker is lost at once
    await _expire(engine, run.id)
    async with running_worker(engine, dispatch=False):
        done = await engine.wait_for_run(run.id, timeout=30)

    assert done.status.value == "completed" and lost.run.id == run.id
    # The rescue counted one (before the step began); the first step's full checkpoint
    # reset it, and the steps after it went ahead of the row.
    assert lags == [(seq, 1, seq + 1) for seq in range(1, 11)]
    row = await engine.db.pool.fetchrow("SELECT rescues, unstarted_rescues FROM runs WHERE id = $1", run.id)
    assert (row["rescues"], row["unstarted_rescues"]) == (0, 0)


async def test_a_new_runs_steps_written_ahead_from_its_first_are_caught_up_by_the_next_claim(
    engine: Engine,
) -> None:
    await engine.publish_workflow(chain("ahead_from_first", 6))
    run = await engine.start_run("ahead_from_first")
    [claimed] = await runs.claim(engine.db.pool, OWNER, 1, 30.0, 3)
    token = claimed.run.fencing_token
    assert not claimed.counts_rescues  # nothing to reset: its first step may go ahead
    assert await runs.begin(engine.db.pool, run.workspace_id, run.id, token, OWNER)
    for seq in (0, 1):  # written ahead of a row still at step 0; then the worker is lost
        state = {"node": f"s{seq + 1}"}  # as the chain's steps leave it
        assert await steps_ahead.write_ahead(
            engine.db.pool, run.workspace_id, run.id, token, OWNER, 0, _step(seq), state
        )
    assert (await _row(engine, run.id))["step_seq"] == 0
    assert (await engine.get_run(run.id)).step_seq == 2  # a reader catches up from step 0
    await _expire(engine, run.id)

    async with running_worker(engine, dispatch=False):
        done = await engine.wait_for_run(run.id, timeout=30)

    # The claim caught the row up from step 0: the written steps did not run again.
    assert done.status.value == "completed" and done.step_seq == 6
    steps = await engine.list_steps(run.id)
    assert [s.seq for s in steps] == list(range(6))
    assert [s.worker for s in steps[:2]] == [OWNER, OWNER]
    row = await engine.db.pool.fetchrow("SELECT rescues FROM runs WHERE id = $1", run.id)
    assert row["rescues"] == 0  # counted (begun), then reset by the next completed step


async def test_a_catch_up_looks_no_further_than_one_stretch_past_the_rows_counter(engine: Engine) -> None:
    # A completed step a stretch or more past the row's counter was not written ahead (a
    # stretch is at most STRETCH long): no reader, claim or trigger takes the run there.
    ws, run_id, token = await _held_after_one_step(engine)
    far = _step(1 + steps_ahead.STRETCH)
    await engine.db.pool.execute(
        "INSERT INTO run_steps (workspace_id, run_id, seq, attempt, node_id, kind, status, idempotency_key,"
        " fencing_token, started_at, finished_at, state) VALUES ($1, $2, $3, 0, $4, 'tool', 'completed', 'k', $5,"
        " now(), now(), '{\"x\": 99}')",
        ws, run_id, far.seq, far.node_id, token,
    )  # fmt: skip
    assert (await engine.get_run(run_id)).step_seq == 1
    await _write(engine, ws, run_id, token, 1, 1)
    assert (await engine.get_run(run_id)).step_seq == 2, "the stretch itself is seen"
    await engine.db.pool.execute("UPDATE runs SET cancel_requested = true WHERE id = $1", run_id)
    assert await runs.finish_cancel(engine.db.pool, ws, run_id, token, OWNER)
    row = await _row(engine, run_id)
    assert (row["step_seq"], row["state"]) == (2, {"x": 1})


def test_the_trigger_and_the_claim_look_as_far_as_a_stretch() -> None:
    for name in ("0039_steps_written_ahead.sql", "0040_model_steps_written_ahead.sql"):  # the trigger's
        sql = (Path(migrations.__file__).parent / name).read_text()
        assert f"NEW.step_seq + {steps_ahead.STRETCH} " in sql
    assert f"r.step_seq + {steps_ahead.STRETCH} " in claims._RUNNING_STEP
    assert pure_steps.MAX_AHEAD == steps_ahead.STRETCH


async def test_the_claim_tells_which_runs_were_in_progress_before_it(engine: Engine) -> None:
    # Only those may lag steps written ahead: a lost worker's, and one handed back running.
    ws, lapsed_id, _token = await _held_after_one_step(engine)
    await _expire(engine, lapsed_id)
    [lapsed] = await runs.claim(engine.db.pool, OTHER, 1, 30.0, 3)
    assert lapsed.run.id == lapsed_id and lapsed.was_running
    released = await engine.start_run("ahead")
    [new] = await runs.claim(engine.db.pool, OTHER, 1, 30.0, 3)
    assert new.run.id == released.id and not new.was_running
    assert await runs.release(engine.db.pool, ws, released.id, new.run.fencing_token, OTHER)
    waiting = await engine.start_run("ahead")
    await engine.db.pool.execute("UPDATE runs SET status = 'waiting', step_seq = 1 WHERE id = $1", waiting.id)

    claimed = {c.run.id: c.was_running for c in await runs.claim(engine.db.pool, OWNER, 2, 30.0, 3)}

    assert claimed == {released.id: True, waiting.id: False}


@pytest.mark.parametrize("handed_back", [True, False])
async def test_a_worker_catches_up_a_run_handed_back_running_and_reads_nothing_more_for_a_waiting_one(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, handed_back: bool
) -> None:
    # A chain of six held by OWNER: step 0 checkpointed, steps 1 and 2 written ahead.
    reads: list[UUID] = []
    caught_up = steps_ahead.caught_up

    async def counted(pool: asyncpg.Pool, run: Any) -> Any:
        if sys._getframe(1).f_code.co_name == "_drive":  # the worker's, not the engine's reads
            reads.append(run.id)
        return await caught_up(pool, run)

    monkeypatch.setattr(worker.steps_ahead, "caught_up", counted)
    await engine.publish_workflow(chain("ahead6", 6))
    started = await engine.start_run("ahead6")
    [claimed] = await runs.claim(engine.db.pool, OWNER, 1, 30.0, 3)
    ws, run_id, token = claimed.run.workspace_id, started.id, claimed.run.fencing_token
    moved = RunWrite("in_progress", None, {"node": "s1"}, None, None, advance=True)
    assert await runs.checkpoint(engine.db.pool, ws, run_id, token, OWNER, moved, _step(0))
    for seq in (1, 2):
        assert await steps_ahead.write_ahead(
            engine.db.pool, ws, run_id, token, OWNER, 1, _step(seq), {"node": f"s{seq + 1}"}
        )
    if handed_back:  # released after an outage, its row still at step 1
        assert await runs.release(engine.db.pool, ws, run_id, token, OWNER)
    else:  # it went on waiting: the checkpoint that said so caught the row up (here, by hand)
        await engine.db.pool.execute(
            "UPDATE runs SET status = 'waiting', step_seq = 3, state = '{\"node\": \"s3\"}',"
            " lease_owner = NULL, lease_expires_at = NULL, due_at = now() WHERE id = $1",
            run_id,
        )

    async with running_worker(engine, dispatch=False):
        done = await engine.wait_for_run(run_id, timeout=30)

    assert done.status.value == "completed"
    assert [s.seq for s in await engine.list_steps(run_id)] == list(range(6)), "each step once"
    assert reads == ([run_id] if handed_back else [])


@pytest.mark.parametrize("statement", ["engine", "join"])
async def test_a_catch_up_reads_its_runs_steps_only_however_many_the_workspace_holds(
    engine: Engine, statement: str
) -> None:
    # Whatever plan PostgreSQL would pick, each run's steps are looked up on their own: with its
    # own choice, and with only a hash join allowed. Negative control ("join"): the runs joined
    # with every completed step, as the read was first written, then reads all of the
    # workspace's completed steps (it did so with its own choice on tables without statistics:
    # 5 ms a read at 12,000 steps, and resumed runs waited behind it).
    ws, run_id, token = await _held_after_one_step(engine)
    await _write(engine, ws, run_id, token, 1, 1)
    others = [(await engine.start_run("ahead")).id for _ in range(20)]
    await engine.db.pool.execute(
        "INSERT INTO run_steps (workspace_id, run_id, seq, attempt, kind, status, idempotency_key,"
        " fencing_token, started_at, finished_at)"
        " SELECT $1, o, n, 0, 'tool', 'completed', o::text || ':' || n, 1, now(), now()"
        " FROM unnest($2::uuid[]) AS o, generate_series(0, 99) AS n",
        ws, others,
    )  # fmt: skip
    query = steps_ahead._NEWEST_AHEAD_OF_EACH
    if statement == "join":
        query = (
            "SELECT DISTINCT ON (s.run_id) s.run_id, s.seq, s.state FROM run_steps s"
            " JOIN unnest($2::uuid[], $3::int[]) AS r(id, counter) ON s.run_id = r.id"
            " WHERE s.workspace_id = $1 AND s.status = 'completed' AND s.seq >= r.counter"
            " AND s.seq < r.counter + 64 ORDER BY s.run_id, s.seq DESC"
        )
    async with engine.db.pool.acquire() as conn:
        rows = await conn.fetch(query, ws, [run_id], [1])
        plans = []
        for allowed in ("on", "off"):  # nested loops and merge joins
            await conn.execute(f"SET enable_nestloop = {allowed}; SET enable_mergejoin = {allowed}")
            plan = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}", ws, [run_id], [1])
            plans.append(plan if isinstance(plan, list) else json.loads(plan))
        await conn.execute("RESET enable_nestloop; RESET enable_mergejoin")

    assert [(r["run_id"], r["seq"]) for r in rows] == [(run_id, 1)]
    read = [_rows_read_from(plan[0]["Plan"]) for plan in plans]
    if statement == "engine":
        assert max(read) <= 2, f"{read} step rows read"
    else:
        assert read[1] >= 2000, f"{read} step rows read"


def _rows_read_from(node: dict[str, Any]) -> int:
    """Rows the plan's scans of run_steps returned, over all their loops."""
    own = node["Actual Rows"] * node["Actual Loops"] if node.get("Relation Name") == "run_steps" else 0
    return own + sum(_rows_read_from(child) for child in node.get("Plans", []))
