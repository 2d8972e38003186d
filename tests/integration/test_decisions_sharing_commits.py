"""An agent's decision that asks only for calls its next checkpoint makes shares that commit.

A decision asking for ``create_task``, ``send_notification`` or ``complete`` (and nothing that
needs an approval) is not checkpointed alone: its row, with its model call's tokens, is written
in the checkpoint of its first call, which counts those tokens on the run and the workspace's
day, and consumes the inbox rows the decision saw (under the decision's number). Any other
decision (a call that needs approval, one that reaches outside the engine) is checkpointed
before its call runs. Each step keeps its own row, number and times.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from agentflow.core.chat import Message, ModelRequest
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from agentflow.store import replays
from tests.support.agents import agent_workflow, calls, running_worker, until
from tests.support.inbox_delivery import DELIVER_URL

RENEWAL = {"topic": "meeting.completed", "data": {"title": "Renewal call"}}


def _recording(*messages: Message) -> tuple[ScriptedProvider, list[ModelRequest]]:
    """A scripted model answering ``messages`` in order, and the requests it was sent."""
    queue, asked = list(messages), []

    def respond(request: ModelRequest) -> Message:
        asked.append(request)
        return queue.pop(0) if queue else calls(("complete", {"summary": "script exhausted"}))

    return ScriptedProvider(respond), asked


async def _steps(engine: Engine, run_id: UUID) -> list[dict[str, Any]]:
    rows = await engine.db.pool.fetch(
        "SELECT seq, kind, name, status, xmin::text AS tx, model, input_tokens, output_tokens, usd_cost"
        " FROM run_steps WHERE run_id = $1 ORDER BY id",
        run_id,
    )
    return [dict(r) for r in rows]


async def test_a_decision_rides_in_the_checkpoint_of_the_task_it_asks_for(engine: Engine) -> None:
    model, asked = _recording(
        calls(("create_task", {"title": "Send the SSO guide", "priority": "high"})),
        calls(("complete", {"summary": "Created the task."})),
    )
    await engine.publish_workflow(agent_workflow())
    async with running_worker(engine, model=model):
        run = await engine.start_run("meeting-follow-up", {"note": "manual"})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error

    steps = await _steps(engine, run.id)
    assert [(s["seq"], s["kind"], s["name"]) for s in steps] == [
        (0, "agent.decide", steps[0]["name"]),
        (1, "agent.tool", "create_task"),
        (2, "agent.decide", steps[2]["name"]),
        (3, "agent.tool", "complete"),
    ]
    assert all(s["status"] == "completed" for s in steps)
    # Each decision shares its call's commit; the two pairs are two commits, not four.
    assert steps[0]["tx"] == steps[1]["tx"] and steps[2]["tx"] == steps[3]["tx"]
    assert steps[0]["tx"] != steps[2]["tx"]
    # A decision's row keeps its model call; a call's row has none.
    decisions, acts = steps[0::2], steps[1::2]
    assert all(d["model"] and d["input_tokens"] > 0 and d["output_tokens"] > 0 for d in decisions)
    assert all(a["model"] is None and a["input_tokens"] == 0 and a["usd_cost"] == 0 for a in acts)
    # Counted once on the run and on the workspace's day.
    assert done.input_tokens == sum(d["input_tokens"] for d in decisions)
    assert done.output_tokens == sum(d["output_tokens"] for d in decisions)
    assert done.costs[0]["calls"] == 2 and done.costs[0]["input_tokens"] == done.input_tokens
    day = await engine.db.pool.fetchrow(
        "SELECT input_tokens, output_tokens, model_calls FROM workspace_usage WHERE workspace_id = $1",
        done.workspace_id,
    )
    assert dict(day) == {
        "input_tokens": done.input_tokens, "output_tokens": done.output_tokens, "model_calls": 2
    }  # fmt: skip
    tasks = await engine.tasks.list(run_id=run.id)
    assert [(t.title, t.priority) for t in tasks] == [("Send the SSO guide", "high")]
    # The second decision was shown the task as created (what the worker kept of the first).
    second = "\n".join(m.content for m in asked[1].messages)
    assert "Send the SSO guide" in second


async def test_a_decision_whose_call_needs_an_approval_is_checkpointed_alone(engine: Engine) -> None:
    model, _ = _recording(calls(("create_task", {"title": "Needs a yes"})))
    await engine.publish_workflow(agent_workflow(approvals=["create_task"]))
    async with running_worker(engine, model=model):
        run = await engine.start_run("meeting-follow-up", {"note": "manual"})
        await until(engine, run.id, lambda r: r.status == "waiting")
    steps = await _steps(engine, run.id)
    decision = steps[0]
    assert decision["kind"] == "agent.decide" and decision["status"] == "completed"
    assert decision["input_tokens"] > 0
    assert all(s["tx"] != decision["tx"] for s in steps[1:]), steps
    assert await engine.tasks.list(run_id=run.id) == [], "nothing created before the approval"


async def test_a_decision_with_a_call_outside_the_engine_is_checkpointed_before_it(engine: Engine) -> None:
    # ``wait`` stops the run on a timer; any call but the shared ones goes after its decision's commit.
    model, _ = _recording(calls(("wait", {"duration": "1h"})))
    await engine.publish_workflow(agent_workflow())
    async with running_worker(engine, model=model):
        run = await engine.start_run("meeting-follow-up", {"note": "manual"})
        await until(engine, run.id, lambda r: r.status == "waiting")
    steps = await _steps(engine, run.id)
    assert [(s["kind"], s["name"]) for s in steps][1:] == [("agent.tool", "wait")]
    assert steps[0]["tx"] != steps[1]["tx"]


async def test_a_decision_woken_by_an_event_consumes_it_in_its_calls_checkpoint(
    engine: Engine, database_url: str
) -> None:
    DELIVER_URL["url"] = database_url
    model, asked = _recording(
        # The first decision has an event delivered and waits; the delivery ends the wait.
        calls(("test_deliver_to_my_inbox", {"payload": RENEWAL}), ("wait", {"duration": "1h"})),
        calls(("create_task", {"title": "Prepare the renewal"})),
        calls(("complete", {"summary": "Handled the renewal call."})),
    )
    await engine.publish_workflow(agent_workflow(tools=["test_deliver_to_my_inbox"]))
    async with running_worker(engine, model=model):
        run = await engine.start_run("meeting-follow-up", {"note": "manual"})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    assert "Renewal call" in "\n".join(m.content for m in asked[1].messages), "the second decision saw it"

    steps = await _steps(engine, run.id)
    woken = next(s for s in steps if s["kind"] == "agent.decide" and s["seq"] > 0 and s["seq"] < steps[-1]["seq"]
                 and any(t["name"] == "create_task" and t["seq"] == s["seq"] + 1 for t in steps))  # fmt: skip
    task_call = next(s for s in steps if s["seq"] == woken["seq"] + 1)
    assert task_call["name"] == "create_task"
    assert woken["tx"] == task_call["tx"], "the woken decision rode in its call's checkpoint"
    rows = await engine.db.pool.fetch(
        "SELECT consumed_at IS NOT NULL AS consumed, consumed_seq, xmin::text AS tx FROM run_inbox"
        " WHERE run_id = $1 AND kind = 'event'",
        run.id,
    )
    # Consumed once, by that checkpoint, under the decision's own number.
    assert [dict(r) for r in rows] == [{"consumed": True, "consumed_seq": woken["seq"], "tx": woken["tx"]}]
    seen = await replays.events_seen(engine.db.pool, done.workspace_id, run.id, woken["seq"])
    assert [e["payload"]["data"]["title"] for e in seen] == ["Renewal call"]
    # The last decision was not shown the event again as new.
    assert len(asked) == 3
    assert "Renewal call" not in asked[2].messages[-1].content
    tasks = await engine.tasks.list(run_id=run.id)
    assert [t.title for t in tasks] == ["Prepare the renewal"]
