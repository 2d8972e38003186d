"""A worker killed (-9) after an agent's decision and its call ran, before the checkpoint that
writes both: the run is rescued, the model is asked again, and every step, task and token is
recorded once.

A decision that asks only for calls its next checkpoint makes (here ``create_task``) rides in
that checkpoint. The starting process (a real subprocess with its own worker) kills itself at
its first checkpoint (failpoint ``before_checkpoint``): by then the decision and the call have
run, and nothing of them is stored. Once the lease expires another worker takes the run, asks
the same scripted model again and goes on. In the second case an event waits in the run's
inbox before its first decision: the decision consumes it in that same checkpoint, so the kill
leaves it unconsumed and the rescuing decision sees it and consumes it, once. The negative
control rescues the run with a worker whose checkpoint drops the decision it was given: the
count must find the decisions (and the event's consumption) missing.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from tests.conftest import make_settings
from tests.support.agents import agent_workflow, calls, running_worker
from tests.support.kills import drop_prior_steps, kill_at_first_checkpoint

pytestmark = pytest.mark.fault

LEASE_TTL = 2.0
TASK = {"title": "Send the SSO guide", "priority": "high"}
STARTER = """
import asyncio, sys
from agentflow.core.chat import Message, ToolCall
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from agentflow.settings import Settings

async def main() -> None:
    settings = Settings(database_url=sys.argv[1], lease_ttl=float(sys.argv[2]), pool_min_size=1, pool_max_size=4)
    engine = await Engine.connect(settings, migrate_schema=False)
    model = ScriptedProvider.from_replies([
        Message("assistant", "", (ToolCall("c0", "create_task", {"title": "Send the SSO guide", "priority": "high"}),)),
        Message("assistant", "", (ToolCall("c0", "complete", {"summary": "Created the task."}),)),
    ])
    worker = engine.worker(concurrency=1, dispatch=False, model=model)
    run = await engine.start_run("meeting-follow-up", {"note": "kill"})
    if sys.argv[3:] == ["event"]:  # delivered before the worker claims the run
        await engine.db.pool.execute(
            "INSERT INTO run_inbox (workspace_id, run_id, kind, payload) VALUES ($1, $2, 'event', $3)",
            run.workspace_id, run.id, '{"topic": "meeting.completed", "data": {"title": "Renewal call"}}',
        )
    print(run.id, flush=True)
    await worker.run()  # the first checkpoint's failpoint kills this process

asyncio.run(main())
"""


def _model() -> ScriptedProvider:
    """The starter's replies, for the rescuing worker."""
    return ScriptedProvider.from_replies(
        [calls(("create_task", TASK)), calls(("complete", {"summary": "Created the task."}))]
    )


async def strand(engine: Engine, database_url: str, event: bool) -> UUID:
    """A run whose worker died with its decision and its call run, neither written (with
    ``event``, an event the decision saw waits in its inbox)."""
    run_id = await kill_at_first_checkpoint(STARTER, database_url, LEASE_TTL, *(["event"] if event else []))
    stranded = await engine.get_run(run_id)
    assert stranded.status.value == "in_progress" and stranded.lease_owner is not None
    assert await engine.list_steps(run_id) == [], "the decision was not written alone"
    assert await engine.tasks.list(run_id=run_id) == []
    assert await _events(engine, run_id) == ([(False, None)] if event else []), "still unconsumed"
    return run_id


async def _events(engine: Engine, run_id: UUID) -> list[tuple[bool, int | None]]:
    """The run's delivered events: (consumed, by which step)."""
    rows = await engine.db.pool.fetch(
        "SELECT consumed_at IS NOT NULL AS consumed, consumed_seq FROM run_inbox"
        " WHERE run_id = $1 AND kind = 'event' ORDER BY id",
        run_id,
    )
    return [(r["consumed"], r["consumed_seq"]) for r in rows]


async def rescue(engine: Engine, run_id: UUID) -> tuple[Any, dict[str, int]]:
    """Let a worker of this process finish the run; its status and completed rows by kind."""
    async with running_worker(engine, dispatch=False, model=_model()):
        done = await engine.wait_for_run(run_id, timeout=60)
    rows = await engine.db.pool.fetch(
        "SELECT kind, count(*) AS n FROM run_steps WHERE run_id = $1 AND status = 'completed' GROUP BY kind",
        run_id,
    )
    return done, {r["kind"]: r["n"] for r in rows}


@pytest.mark.parametrize("event", [False, True], ids=["started", "event-woken"])
async def test_a_decision_cut_off_by_a_kill_is_asked_again_and_recorded_once(
    database_url: str, event: bool
) -> None:
    engine = await Engine.connect(make_settings(database_url, lease_ttl=LEASE_TTL), migrate_schema=False)
    try:
        await engine.publish_workflow(agent_workflow())
        run_id = await strand(engine, database_url, event)
        done, counted = await rescue(engine, run_id)
        assert done.status.value == "completed", done.error
        assert counted == {"agent.decide": 2, "agent.tool": 2}
        steps = await engine.list_steps(run_id)
        assert [(s.seq, s.kind) for s in steps] == [
            (0, "agent.decide"), (1, "agent.tool"), (2, "agent.decide"), (3, "agent.tool")
        ]  # fmt: skip
        assert {s.fencing_token for s in steps} == {2}, "all under the rescuing claim"
        tasks = await engine.tasks.list(run_id=run_id)
        assert [(t.title, t.priority) for t in tasks] == [(TASK["title"], TASK["priority"])]
        decisions = [s for s in steps if s.kind == "agent.decide"]
        assert done.input_tokens == sum(d.input_tokens for d in decisions) > 0
        day = await engine.db.pool.fetchval("SELECT model_calls FROM workspace_usage")
        assert day == 2, "the recorded calls, each counted once"
        # The event: consumed once, by the rescuing decision that saw it.
        assert await _events(engine, run_id) == ([(True, 0)] if event else [])
    finally:
        await engine.close()


@pytest.mark.parametrize("event", [False, True], ids=["started", "event-woken"])
async def test_negative_control_a_checkpoint_that_drops_its_decision_is_caught(
    database_url: str, monkeypatch: pytest.MonkeyPatch, event: bool
) -> None:
    engine = await Engine.connect(make_settings(database_url, lease_ttl=LEASE_TTL), migrate_schema=False)
    try:
        await engine.publish_workflow(agent_workflow())
        run_id = await strand(engine, database_url, event)
        drop_prior_steps(monkeypatch)
        done, counted = await rescue(engine, run_id)
        assert done.status.value == "completed"
        assert counted == {"agent.tool": 2}, counted  # the decisions and their tokens are gone
        assert done.input_tokens == 0
        assert await _events(engine, run_id) == ([(False, None)] if event else []), "never consumed"
    finally:
        await engine.close()
