"""A claimed structured run's begin goes out as its first step starts: the step need not wait
for the answer while the claim's lease is young, its first write does, and a begin that finds
the lease lost fences that write. An old lease is begun before the step, as an agent's is."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg

from agentflow.core.config_validation import validate_config
from agentflow.core.inbox import EMPTY
from agentflow.core.statuses import RunStatus
from agentflow.core.step_results import Transition
from agentflow.engine import Engine
from agentflow.runtime import begins
from agentflow.runtime.step import Cursor, StepOutcome
from agentflow.store import runs
from agentflow.store.checkpoints import RunWrite, StepWrite
from tests.integration.test_claims import FLOW, claim_one, lapse


class HeldBack:
    """A fetcher whose statements are sent only once ``release`` is set (a slow answer)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.release = asyncio.Event()
        self.sent: list[str] = []

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        self.sent.append(query)
        await self.release.wait()
        return await self.pool.fetchrow(query, *args)


OUTCOME = StepOutcome(
    Transition(RunStatus.COMPLETED, {}, "completed"),
    RunWrite("completed", None, {}, {"ok": True}, None, advance=True),
    StepWrite(0, 1, "done", "finish", None, "completed", {}, {"ok": True}, None, duration=0.001),
)


async def began_token(engine: Engine, run: runs.Claimed) -> int | None:
    token = await engine.db.pool.fetchval("SELECT began_token FROM runs WHERE id = $1", run.run.id)
    return None if token is None else int(token)


async def claimed_run(engine: Engine) -> runs.Claimed:
    await engine.publish_workflow(FLOW)
    return await claim_one(engine, "w1", (await engine.start_run("claims", {})).id)


async def test_a_young_claims_step_starts_before_its_begin_is_answered(engine: Engine) -> None:
    claimed = await claimed_run(engine)
    config = validate_config(FLOW)
    cursor = Cursor.of(claimed.run, {})
    fetcher = HeldBack(engine.db.pool)
    began, in_flight = await begins.begin(fetcher, config, claimed.run, "w1", cursor, young=True)
    # The step may start: the begin is sent (its task took its turn) but not answered.
    assert began is cursor and in_flight is not None and len(fetcher.sent) == 1
    assert await began_token(engine, claimed) is None
    first = asyncio.create_task(in_flight.ready(OUTCOME))  # the step's first write asks
    settled = asyncio.create_task(in_flight.settle())  # as the run's driver does as it ends
    await asyncio.sleep(0.05)
    assert not first.done() and not settled.done()  # both wait for the begin's answer
    fetcher.release.set()
    ready = await first
    await settled
    # Its step is told to have started before the wait: the write counts back that far.
    assert ready is not None and ready.step.duration >= OUTCOME.step.duration + 0.05
    assert ready.step.output == OUTCOME.step.output and ready.run == OUTCOME.run
    assert await in_flight.ready(OUTCOME) == OUTCOME  # answered: a later write waits for nothing
    assert await began_token(engine, claimed) == claimed.run.fencing_token


async def test_a_begin_that_finds_the_lease_lost_fences_the_steps_write(engine: Engine) -> None:
    claimed = await claimed_run(engine)
    await lapse(engine, claimed.run.id)
    await claim_one(engine, "w2", claimed.run.id)  # another worker rescued the run meanwhile
    cursor = Cursor.of(claimed.run, {}, EMPTY)
    _, in_flight = await begins.begin(
        engine.db.pool, validate_config(FLOW), claimed.run, "w1", cursor, young=True
    )
    assert in_flight is not None
    assert await in_flight.ready(OUTCOME) is None  # the step's write is not made


async def test_an_old_lease_is_begun_before_the_step_starts(engine: Engine) -> None:
    claimed = await claimed_run(engine)
    cursor = Cursor.of(claimed.run, {})
    began, in_flight = await begins.begin(
        engine.db.pool, validate_config(FLOW), claimed.run, "w1", cursor, young=False
    )
    assert began is cursor and in_flight is None
    assert await began_token(engine, claimed) == claimed.run.fencing_token
    await lapse(engine, claimed.run.id)
    again = await claim_one(engine, "w2", claimed.run.id)
    assert again.run.rescues == 1  # the begin counted: the step was cut off
    await lapse(engine, claimed.run.id)
    await claim_one(engine, "w3", claimed.run.id)
    lost, in_flight = await begins.begin(
        engine.db.pool, validate_config(FLOW), again.run, "w2", cursor, young=False
    )
    assert lost is None and in_flight is None


class Failing:
    """A fetcher whose statement fails (the database went away)."""

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        raise ConnectionResetError("the database went away")


async def test_a_begin_that_failed_leaves_the_write_to_its_own_fence(engine: Engine) -> None:
    claimed = await claimed_run(engine)
    cursor = Cursor.of(claimed.run, {})
    _, in_flight = await begins.begin(Failing(), validate_config(FLOW), claimed.run, "w1", cursor, young=True)
    assert in_flight is not None
    await in_flight.settle()  # its error is not raised here: the lease expires, a claim rescues
    # A write after it goes on: fenced on the lease itself, it marks the step begun; a step
    # that ran is not run again because its begin failed.
    assert await in_flight.ready(OUTCOME) == OUTCOME


def test_a_lease_is_young_for_half_its_ttl() -> None:
    now = time.monotonic()
    assert begins.is_young(now, 30.0)
    assert begins.is_young(now - 14.0, 30.0)
    assert not begins.is_young(now - 16.0, 30.0)
