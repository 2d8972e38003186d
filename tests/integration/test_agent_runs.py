"""Agent runs end to end on a real database: decide, act, wait, wake on task changes, complete.

The model is the scripted provider (the default policy, or explicit replies); everything else
is real: the dispatcher, the worker, checkpoints, tasks, the outbox.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

from agentflow.core.chat import Message, ModelRequest
from agentflow.engine import Engine
from tests.support.agents import (
    agent_workflow,
    calls,
    first_run,
    meeting_event,
    replies,
    running_worker,
    until,
)
from tests.support.inbox_delivery import DELIVER_URL


async def test_a_meeting_becomes_tasks_and_the_run_completes_when_they_are_done(engine: Engine) -> None:
    await engine.publish_workflow(agent_workflow())
    async with running_worker(engine):
        await engine.events.publish([meeting_event()])
        run = await first_run(engine, "meeting-follow-up")
        run = await until(engine, run.id, lambda r: r.status == "waiting")
        assert run.status_reason == "awaiting_event"
        tasks = await engine.tasks.list(run_id=run.id)
        assert sorted(t.title for t in tasks) == [
            "Schedule an executive business review",
            "Send the SSO setup guide to Acme IT",
        ]
        sso = next(t for t in tasks if t.title.startswith("Send"))
        assert (sso.assignee, sso.priority, sso.account_id) == ("dana@acme.example", "high", "acme")
        assert sso.system_generated and sso.due_at is not None and sso.expires_at is not None
        assert (sso.expires_at - sso.created_at).days == 7

        # Completing one task wakes the run; it waits again for the other.
        await engine.tasks.complete(sso.id)
        await until(engine, run.id, lambda r: r.step_seq > run.step_seq and r.status == "waiting")
        other = next(t for t in tasks if t is not sso)
        await engine.tasks.complete(other.id)
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    assert "All 2 tasks are done" in done.output["summary"]
    steps = await engine.list_steps(run.id)
    kinds = [(s.kind, s.name) for s in steps if s.status == "completed"]
    assert kinds[0][0] == "agent.decide" and kinds[0][1].startswith("scripted")
    assert [k for k in kinds if k[0] == "agent.tool"][:2] == [("agent.tool", "create_task")] * 2
    # The decision after the first completion saw the task change in its context.
    decisions = [s for s in steps if s.kind == "agent.decide" and s.status == "completed"]
    assert any(e["payload"]["topic"] == "task.completed" for d in decisions[1:] for e in d.input["events"]), [
        d.input for d in decisions
    ]
    # Every model call recorded tokens on its step and on the run, with a per-model breakdown.
    assert all(d.input_tokens > 0 and d.output_tokens > 0 and d.model for d in decisions)
    assert done.input_tokens == sum(d.input_tokens for d in decisions)
    assert done.costs and done.costs[0]["calls"] == len(decisions)
    assert done.costs[0]["input_tokens"] == done.input_tokens


async def test_tool_calls_are_checked_against_the_allow_list_and_their_schema(engine: Engine) -> None:
    model = replies(
        calls(
            ("delete_account", {"id": "acme"}), ("create_task", {"title": ""}), ("create_task", {"bogus": 1})
        ),
        calls(("create_task", {"title": "Valid task", "priority": "urgent", "due_in": "1d"})),
    )
    await engine.publish_workflow(agent_workflow())
    async with running_worker(engine, model=model):
        run = await engine.start_run("meeting-follow-up", {"note": "manual"})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed"
    steps = [s for s in await engine.list_steps(run.id) if s.kind == "agent.tool"]
    refused = [s.output["result"]["error"]["code"] for s in steps if s.output.get("refused")]
    assert refused == ["tool_not_allowed", "invalid_tool_args", "invalid_tool_args"]
    tasks = await engine.tasks.list(run_id=run.id)
    assert [(t.title, t.priority) for t in tasks] == [("Valid task", "urgent")]
    assert done.state["agent"]["tool_calls"] == 5


async def test_a_budget_suspends_the_run_with_a_reason_and_resume_grants_more(engine: Engine) -> None:
    looping = replies(*[calls(("create_task", {"title": f"task {n}"})) for n in range(10)])
    await engine.publish_workflow(agent_workflow(budget={"max_model_calls": 3}))
    async with running_worker(engine, model=looping):
        run = await engine.start_run("meeting-follow-up", {})
        suspended = await until(engine, run.id, lambda r: r.status == "suspended")
        assert suspended.status_reason == "budget_model_calls"
        assert "3 of its 3 model calls budget" in suspended.error["message"]
        assert "resume" in suspended.error["solution"]
        assert len(await engine.tasks.list(run_id=run.id)) == 3
        resumed = await engine.governance.resume(run.id, {"model_calls": 2})
        assert resumed.status == "in_progress"
        again = await until(
            engine, run.id, lambda r: r.status == "suspended" and r.step_seq > suspended.step_seq
        )
    assert len(await engine.tasks.list(run_id=run.id)) == 5
    assert again.state["agent"]["model_calls"] == 5


async def test_with_on_text_complete_an_answer_without_tool_calls_completes_the_run(engine: Engine) -> None:
    await engine.publish_workflow(agent_workflow(on_text="complete"))
    async with running_worker(engine, model=replies(Message("assistant", "Nothing needs doing."))):
        run = await engine.start_run("meeting-follow-up", {})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert (done.status, done.output["summary"]) == ("completed", "Nothing needs doing.")
    assert done.usd_cost == Decimal(0)  # the scripted model is free


async def test_the_model_gate_decides_with_a_recorded_reason(engine: Engine) -> None:
    await engine.accounts.upsert("acme", name="Acme", owner="dana@acme.example")
    await engine.publish_workflow(
        agent_workflow(
            "pricing-watch",
            prompt="Tell the account owner when a customer raises pricing concerns.",
            sources=[{"type": "email"}],
            gate={"instructions": "Only emails about price."},
        )
    )
    emails = [
        {
            "topic": "email.received",
            "message_id": "e1",
            "account_id": "acme",
            "data": {"body": "Your pricing is too high"},
        },
        {
            "topic": "email.received",
            "message_id": "e2",
            "account_id": "acme",
            "data": {"body": "Thanks for the demo!"},
        },
    ]
    async with running_worker(engine):
        await engine.events.publish(emails)
        run = await first_run(engine, "pricing-watch")
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
        for _ in range(100):
            rows = await engine.db.pool.fetch(
                "SELECT event_message_id, decision, reason FROM dispatch_decisions"
            )
            notes = await engine.db.pool.fetch("SELECT 1 FROM notifications WHERE status <> 'pending'")
            if len(rows) == 2 and notes:
                break
            await asyncio.sleep(0.05)
    by_event = {r["event_message_id"]: r for r in rows}
    assert by_event["e1"]["decision"] == "started"
    assert by_event["e1"]["reason"]["gate"]["reason"].startswith("scripted gate: the event mentions")
    assert "pric" in by_event["e1"]["reason"]["gate"]["reason"]
    assert by_event["e1"]["reason"]["gate"]["model"].startswith("scripted")
    assert by_event["e2"]["decision"] != "started"
    assert "nothing in the event matches" in by_event["e2"]["reason"]["gate"]["reason"]
    assert done.status == "completed" and done.output["summary"] == "Notified the account owner."
    (note,) = await engine.db.pool.fetch("SELECT recipient, subject, status FROM notifications")
    assert (note["recipient"], note["subject"]) == ("dana@acme.example", "Pricing concern from Acme")
    assert note["status"] == "failed"  # no SMTP server is configured in this test: a clear reason
    assert "AGENTFLOW_SMTP_URL" in (
        await engine.db.pool.fetchval("SELECT last_error->>'message' FROM notifications")
    )


async def test_a_registered_python_tool_is_offered_with_its_schema_and_called(engine: Engine) -> None:
    import tests.support.tools  # noqa: F401  (registers echo)
    from agentflow.llm.scripted import ScriptedProvider

    seen: list[Any] = []

    def respond(request: ModelRequest) -> Message:
        seen.append(request)
        if len(seen) == 1:
            return calls(("echo", {"value": {"hello": "agent"}}))
        return calls(("complete", {"summary": "echoed"}))

    await engine.publish_workflow(agent_workflow(tools=["echo"]))
    async with running_worker(engine, model=ScriptedProvider(respond)):
        run = await engine.start_run("meeting-follow-up", {})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed"
    echo = next(t for t in seen[0].tools if t.name == "echo")
    assert echo.description == "Return the value it was given." and "value" in echo.parameters["properties"]
    tool_result = next(m for m in seen[1].messages if m.role == "tool")
    assert '"hello":"agent"' in tool_result.content


async def test_a_wait_ends_at_once_when_events_arrived_since_the_last_decision(
    engine: Engine, database_url: str
) -> None:
    DELIVER_URL["url"] = database_url
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> Message:
        seen.append(request)
        if len(seen) == 1:
            return calls(("test_deliver_to_my_inbox", {}), ("wait", {"duration": "1h"}))
        return calls(("complete", {"summary": "saw it"}))

    from agentflow.llm.scripted import ScriptedProvider

    await engine.publish_workflow(agent_workflow(tools=["test_deliver_to_my_inbox"]))
    async with running_worker(engine, model=ScriptedProvider(respond)):
        run = await engine.start_run("meeting-follow-up", {})
        done = await until(engine, run.id, lambda r: r.status.is_terminal, timeout=10)
    assert done.output["summary"] == "saw it"
    assert "arrived meanwhile" in seen[1].messages[-1].content


async def test_a_tool_result_that_cannot_be_stored_reaches_the_model_as_an_error(engine: Engine) -> None:
    import tests.support.tools  # noqa: F401  (registers bad_output, which returns a NUL)

    model = replies(calls(("bad_output", {})), calls(("complete", {"summary": "done"})))
    await engine.publish_workflow(agent_workflow(tools=["bad_output"]))
    async with running_worker(engine, model=model):
        run = await engine.start_run("meeting-follow-up", {"note": "manual"})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed"
    (call,) = [s for s in await engine.list_steps(run.id) if s.kind == "agent.tool"][:1]
    assert call.output["result"]["error"]["code"] == "output_not_storable"
