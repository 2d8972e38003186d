"""Claims under lost workers: a rescue is counted only when the lost worker had begun the
run's step; lapsed runs are claimed ahead of the ready backlog; a claim takes no more runs
than asked; a run a worker just claimed takes its first turn (its begin goes out) before the
worker's claim loop looks for the next due run. Leases are made to lapse by moving their
expiry into the past (the database clock decides lapses, so this is the same as waiting)."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import pytest

from agentflow.engine import Engine
from agentflow.store import agent_reads, runs

FLOW = {
    "name": "claims",
    "kind": "structured",
    "nodes": [{"id": "done", "type": "finish", "output": {"ok": True}}],
}


async def lapse(engine: Engine, run_id: UUID) -> None:
    """Make the run's lease expire now, as if its worker had died a lease TTL ago."""
    await engine.db.pool.execute(
        "UPDATE runs SET lease_expires_at = now() - interval '1 second', due_at = now() - interval '1 second'"
        " WHERE id = $1",
        run_id,
    )


async def claim_one(engine: Engine, owner: str, run_id: UUID, max_rescues: int = 3) -> runs.Claimed:
    claimed = await runs.claim(engine.db.pool, owner, 10, 30.0, max_rescues)
    ours = [c for c in claimed if c.run.id == run_id]
    assert len(ours) == 1, claimed
    return ours[0]


async def test_workers_lost_before_the_step_began_do_not_count_as_rescues(engine: Engine) -> None:
    await engine.publish_workflow(FLOW)
    run = await engine.start_run("claims", {})
    for i in range(6):
        held = await claim_one(engine, f"w{i}", run.id)
        assert held.run.status == "in_progress"
        await lapse(engine, run.id)  # lost after the claim, before begin
    row = await engine.db.pool.fetchrow("SELECT rescues, unstarted_rescues FROM runs WHERE id = $1", run.id)
    assert (row["rescues"], row["unstarted_rescues"]) == (0, 5)


async def test_workers_lost_while_the_step_ran_count_and_fail_the_run_at_the_cap(engine: Engine) -> None:
    await engine.publish_workflow(FLOW)
    run = await engine.start_run("claims", {})
    for i in range(4):
        held = await claim_one(engine, f"w{i}", run.id)
        assert held.run.status == "in_progress", held.run.error
        assert await runs.begin(engine.db.pool, run.workspace_id, run.id, held.run.fencing_token, f"w{i}")
        await lapse(engine, run.id)
    ended = await claim_one(engine, "w-last", run.id)
    assert ended.run.status == "failed" and ended.run.status_reason == "worker_lost"
    error = ended.run.error
    assert error is not None and error["code"] == "worker_lost"
    assert error["details"] == {"while_step_ran": 4, "before_step_began": 0}
    assert "while the step ran" in error["message"]


async def test_a_run_whose_workers_die_before_its_step_begins_fails_at_a_larger_cap(engine: Engine) -> None:
    await engine.publish_workflow(FLOW)
    run = await engine.start_run("claims", {})
    cap = 3 * 1 + 1  # the default for max_rescues=1
    for i in range(cap + 1):  # the first claim, then ``cap`` lapses that are survived
        assert (await claim_one(engine, f"w{i}", run.id, max_rescues=1)).run.status == "in_progress"
        await lapse(engine, run.id)
    ended = await claim_one(engine, "w-last", run.id, max_rescues=1)
    assert ended.run.status == "failed"
    assert ended.run.error is not None and ended.run.error["details"]["before_step_began"] == cap + 1
    assert "before step 0 began" in ended.run.error["message"]


async def test_begin_is_fenced(engine: Engine) -> None:
    await engine.publish_workflow(FLOW)
    run = await engine.start_run("claims", {})
    held = await claim_one(engine, "w1", run.id)
    await lapse(engine, run.id)
    await claim_one(engine, "w2", run.id)
    assert not await runs.begin(engine.db.pool, run.workspace_id, run.id, held.run.fencing_token, "w1")


async def test_lapsed_runs_are_claimed_ahead_of_the_ready_backlog(engine: Engine) -> None:
    await engine.publish_workflow(FLOW)
    lapsed = await engine.start_run("claims", {})
    await claim_one(engine, "dead", lapsed.id)
    backlog = [await engine.start_run("claims", {"i": i}) for i in range(20)]
    await lapse(engine, lapsed.id)
    # The backlog became due before the lease lapsed, yet the lapsed run comes first.
    await engine.db.pool.execute(
        "UPDATE runs SET due_at = now() - interval '1 hour' WHERE id = ANY($1::uuid[])",
        [r.id for r in backlog],
    )
    claimed = await runs.claim(engine.db.pool, "alive", 3, 30.0, 3)
    assert len(claimed) == 3, "a claim takes as many runs as it was asked for, no more"
    assert claimed[0].run.id == lapsed.id and claimed[0].rescued
    assert all(not c.rescued for c in claimed[1:])


async def test_a_claim_takes_exactly_what_it_asks_for_lapsed_or_ready(engine: Engine) -> None:
    # The claim's scans stop at a power of two (a literal, for a lasting plan); the number of
    # runs it takes is still the one asked for, from lapsed runs first, then ready ones.
    await engine.publish_workflow(FLOW)
    lapsed = [await engine.start_run("claims", {"i": i}) for i in range(5)]
    assert len(await runs.claim(engine.db.pool, "dead", 10, 30.0, 3)) == 5
    for run in lapsed:
        await lapse(engine, run.id)
    ready = [await engine.start_run("claims", {"i": i}) for i in range(6)]
    taken = await runs.claim(engine.db.pool, "alive", 3, 30.0, 3)  # bucket 4: 4 lapsed locked, 3 taken
    assert len(taken) == 3 and all(c.rescued for c in taken)
    taken = await runs.claim(engine.db.pool, "alive", 5, 30.0, 3)  # bucket 8: 2 lapsed, then 3 ready
    assert [c.rescued for c in taken].count(True) == 2 and len(taken) == 5
    taken = await runs.claim(engine.db.pool, "alive", 9, 30.0, 3)  # bucket 16: the 3 ready left
    assert len(taken) == 3 and not any(c.rescued for c in taken)
    assert {c.run.id for c in taken} <= {r.id for r in ready}


async def test_the_next_due_run_is_the_earliest_ready_or_held_one(engine: Engine) -> None:
    await engine.publish_workflow(FLOW)
    assert await runs.seconds_to_next_due(engine.db.pool) is None
    waiting, held = await engine.start_run("claims", {}), await engine.start_run("claims", {})
    await claim_one(engine, "alive", held.id)
    for run_id, seconds in ((waiting.id, 50), (held.id, 20)):
        await engine.db.pool.execute(
            "UPDATE runs SET due_at = now() + make_interval(secs => $2) WHERE id = $1", run_id, seconds
        )
    for code in (True, False):
        assert 19 < (await runs.seconds_to_next_due(engine.db.pool, code=code) or 0) <= 20  # the lease
    await engine.db.pool.execute(
        "UPDATE runs SET due_at = now() + interval '5 seconds' WHERE id = $1", waiting.id
    )
    for code in (True, False):
        assert 4 < (await runs.seconds_to_next_due(engine.db.pool, code=code) or 0) <= 5  # the wait


async def test_a_begin_that_reads_for_a_decision_begins_as_begin_does_and_is_fenced(engine: Engine) -> None:
    from tests.support.agents import agent_workflow

    await engine.publish_workflow(agent_workflow("claims-agent"))
    await engine.accounts.upsert("acme", name="Acme")
    run = await engine.start_run("claims-agent", {"account_id": "acme"})
    held = await claim_one(engine, "w1", run.id)
    begun = await agent_reads.begin_reading(
        engine.db.pool, run.workspace_id, run.id, held.run.fencing_token, "w1", "acme"
    )
    # What a decision's own read gives, and the step begun: a worker lost now costs a rescue.
    read = await agent_reads.decision_reads(engine.db.pool, run.workspace_id, run.id, "acme")
    assert begun == read and begun.account is not None and begun.account["name"] == "Acme"
    await lapse(engine, run.id)
    again = await claim_one(engine, "w2", run.id)
    row = await engine.db.pool.fetchrow("SELECT rescues, unstarted_rescues FROM runs WHERE id = $1", run.id)
    assert (row["rescues"], row["unstarted_rescues"]) == (1, 0)
    # Fenced: the lost worker's begin (and its reads) come back empty.
    stale = await agent_reads.begin_reading(
        engine.db.pool, run.workspace_id, run.id, held.run.fencing_token, "w1", "acme"
    )
    assert stale is None
    assert await engine.db.pool.fetchval("SELECT began_token FROM runs WHERE id = $1", run.id) != (
        again.run.fencing_token
    )


async def test_a_claimed_run_begins_before_the_worker_looks_for_the_next_due_run(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    claim, begin, next_due = runs.claim, runs.begin, runs.seconds_to_next_due

    async def claiming(*args: Any, **kwargs: Any) -> list[runs.Claimed]:
        claimed = await claim(*args, **kwargs)
        calls.extend("claimed" for _ in claimed)
        return claimed

    async def beginning(*args: Any, **kwargs: Any) -> bool:
        calls.append("begin")
        return await begin(*args, **kwargs)

    async def looking(*args: Any, **kwargs: Any) -> float | None:
        calls.append("next due")
        return await next_due(*args, **kwargs)

    monkeypatch.setattr(runs, "claim", claiming)
    monkeypatch.setattr(runs, "begin", beginning)
    monkeypatch.setattr(runs, "seconds_to_next_due", looking)
    await engine.publish_workflow(FLOW)
    worker = engine.worker(concurrency=4, dispatch=False)  # free slots left: the loop looks
    task = asyncio.create_task(worker.run())
    try:
        await worker.wait_until_running()
        for _ in range(2):  # the first loads the version's config (a read of its own)
            run = await engine.start_run("claims", {})
            async with asyncio.timeout(10):
                while (await engine.get_run(run.id)).status != "completed":
                    await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
    at = len(calls) - 1 - calls[::-1].index("claimed")
    # The second run's begin comes right after its claim, the loop's look for the next due run
    # after it.
    assert calls[at : at + 3] == ["claimed", "begin", "next due"], calls
