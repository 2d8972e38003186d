"""The scheduler: cron workflows start runs once per fire time, with their catch-up policy."""

from __future__ import annotations

import asyncio
from typing import Any

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.engine import Engine
from agentflow.runtime.scheduler import Scheduler


def scheduled(name: str, **schedule: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "structured",
        "schedule": {"cron": "* * * * *", **schedule},
        "nodes": [
            {"id": "e", "type": "tool", "tool": "echo", "args": {"value": "{{ payload.scheduled_at }}"}}
        ],
    }


async def outage(engine: Engine, name: str, minutes: int) -> None:
    """Pretend the schedule last fired ``minutes`` minute marks ago and is overdue.

    The last fire is put between two minute marks (30 s past one), so exactly ``minutes`` marks
    are missed whatever the second now is; near the end of a minute it waits for the next, so
    the scheduler's tick cannot cross one more mark.
    """
    if await engine.db.pool.fetchval("SELECT extract(second FROM now()) > 57"):
        await asyncio.sleep(3.5)
    wf = await engine.get_workflow(name)
    await engine.db.pool.execute(
        "UPDATE schedules SET last_fire = date_trunc('minute', now()) - make_interval(mins => $2)"
        " + interval '30 seconds',"
        " next_fire_at = now() - interval '1 second' WHERE workflow_id = $1",
        wf.id,
        minutes,
    )


async def scheduled_runs(engine: Engine, name: str) -> list[str]:
    return sorted(r.input["scheduled_at"] for r in await engine.list_runs(workflow=name))


async def test_a_new_schedule_fires_nothing_for_the_past_and_plans_its_next_fire(engine: Engine) -> None:
    await engine.publish_workflow(scheduled("fresh", catch_up="all"))
    scheduler = Scheduler(engine.db)
    assert await scheduler.tick() == 0
    row = await engine.db.pool.fetchrow("SELECT last_fire, next_fire_at, now() AS now FROM schedules")
    assert row["last_fire"] is not None and 0 < (row["next_fire_at"] - row["now"]).total_seconds() <= 60
    assert row["next_fire_at"].second == 0, "a minutely schedule fires on the minute"
    assert await scheduler.tick() == 0, "nothing is due before the next fire time"


async def test_catch_up_all_and_once_after_an_outage(engine: Engine) -> None:
    await engine.publish_workflow(scheduled("every", catch_up="all"))
    await engine.publish_workflow(scheduled("latest", catch_up="once"))
    scheduler = Scheduler(engine.db)
    await scheduler.tick()
    await outage(engine, "every", 3)
    await outage(engine, "latest", 3)
    assert await scheduler.tick() == 3 + 1
    every = await scheduled_runs(engine, "every")
    assert len(every) == len(set(every)) == 3, "each missed fire time started once"
    assert all(value.endswith(":00+00:00") for value in every), every
    assert len(await scheduled_runs(engine, "latest")) == 1
    assert (await scheduled_runs(engine, "latest"))[0] == every[-1], "once starts the latest missed fire"
    assert await scheduler.tick() == 0, "a fire time is started once"


async def test_concurrent_schedulers_start_each_fire_once(engine: Engine) -> None:
    await engine.publish_workflow(scheduled("shared", catch_up="all"))
    await Scheduler(engine.db).tick()
    await outage(engine, "shared", 5)
    started = await asyncio.gather(*[Scheduler(engine.db).tick() for _ in range(4)])
    assert sum(started) == 5
    assert len(await scheduled_runs(engine, "shared")) == 5


async def test_disabled_workflows_let_fire_times_pass_and_unscheduling_removes_the_row(
    engine: Engine,
) -> None:
    await engine.publish_workflow(scheduled("paused", catch_up="all"), enabled=False)
    scheduler = Scheduler(engine.db)
    await scheduler.tick()
    await outage(engine, "paused", 2)
    assert await scheduler.tick() == 0
    assert await engine.list_runs() == []
    cursor = await engine.db.pool.fetchval("SELECT now() - last_fire FROM schedules")
    assert cursor.total_seconds() < 60, "the cursor moved on past the skipped fire times"
    unscheduled = scheduled("paused")
    del unscheduled["schedule"]
    await engine.publish_workflow(unscheduled)
    assert await engine.db.pool.fetchval("SELECT count(*) FROM schedules") == 0


async def test_a_worker_fires_schedules_and_runs_them(engine: Engine) -> None:
    await engine.publish_workflow(scheduled("worked", catch_up="once"))
    w = engine.worker()
    task = asyncio.create_task(w.run())
    try:
        for _ in range(50):
            if await engine.db.pool.fetchval("SELECT next_fire_at IS NOT NULL FROM schedules"):
                break
            await asyncio.sleep(0.05)
        await outage(engine, "worked", 2)
        for _ in range(100):
            runs = await engine.list_runs(workflow="worked")
            if runs and runs[0].status == "completed":
                break
            await asyncio.sleep(0.05)
    finally:
        w.stop()
        await task
    assert [r.status for r in runs] == ["completed"]
    assert runs[0].output == {"value": runs[0].input["scheduled_at"]}


async def test_without_retention_the_scheduler_prunes_nothing(engine: Engine) -> None:
    await engine.events.publish([{"topic": "kept", "data": {"n": 1}}])
    assert await Scheduler(engine.db, retention=None).prune() == (0, 0)
    assert await engine.db.pool.fetchval("SELECT count(*) FROM events") == 1
