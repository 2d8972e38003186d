"""Approvals bound to the exact arguments, notifications through a real SMTP server, the
workspace's daily budget, and the API for all three."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.core.agent_state import arguments_hash
from agentflow.core.errors import ConflictError
from agentflow.engine import Engine
from agentflow.integrations.smtp_sink import SmtpSink
from tests.conftest import make_settings
from tests.support.agents import agent_workflow, calls, replies, running_worker, until

NOTIFY = (
    "send_notification",
    {"channel": "email", "to": "owner@acme.example", "subject": "Hi", "message": "Hello"},
)


@pytest.fixture
def sink() -> AsyncIterator[SmtpSink]:
    with SmtpSink() as server:
        yield server


@pytest.fixture
async def mailing_engine(database_url: str, sink: SmtpSink) -> AsyncIterator[Engine]:
    eng = await Engine.connect(make_settings(database_url, smtp_url=sink.url), migrate_schema=False)
    yield eng
    await eng.close()


async def wait_for_mail(sink: SmtpSink, count: int, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if len(sink.messages) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"expected {count} messages, got {len(sink.messages)}")


async def test_an_approved_call_is_made_once_and_a_rejected_one_never(
    mailing_engine: Engine, sink: SmtpSink
) -> None:
    engine = mailing_engine
    model = replies(calls(NOTIFY), calls(NOTIFY))
    await engine.publish_workflow(agent_workflow(approvals=["send_notification"]))
    async with running_worker(engine, model=model):
        run = await engine.start_run("meeting-follow-up", {})
        waiting = await until(engine, run.id, lambda r: r.status_reason == "awaiting_approval")
        (request,) = await engine.governance.approvals()
        assert request["tool"] == "send_notification" and request["run_id"] == run.id
        assert request["arguments_hash"] == arguments_hash("send_notification", NOTIFY[1])
        await asyncio.sleep(0.5)
        assert sink.messages == []  # nothing happens before a person decides

        # A decision on other arguments than the request's is refused.
        with pytest.raises(ConflictError) as mismatch:
            await engine.governance.decide(request["id"], approve=True, arguments_hash="0" * 64)
        assert mismatch.value.code == "approval_mismatch"
        await engine.governance.decide(request["id"], approve=True, decided_by="lee", reason="fine")
        with pytest.raises(ConflictError) as twice:  # G7: the second decision gets a conflict
            await engine.governance.decide(request["id"], approve=False)
        assert twice.value.code == "approval_decided"
        await wait_for_mail(sink, 1)

        # The second call (same arguments, a new request) is rejected: nothing is sent.
        second = await until(
            engine, run.id, lambda r: r.status_reason == "awaiting_approval" and r.step_seq > waiting.step_seq
        )
        (request2,) = await engine.governance.approvals()
        assert request2["id"] != request["id"]
        await engine.governance.decide(request2["id"], approve=False, reason="too chatty")
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed" and second.step_seq > 0
    await asyncio.sleep(0.3)
    assert len(sink.messages) == 1
    message = sink.messages[0]
    assert message.subject == "Hi" and "Hello" in message.body and message.rcpt_tos == ["owner@acme.example"]
    sends = [
        s for s in await engine.list_steps(run.id) if s.kind == "agent.tool" and s.name == "send_notification"
    ]
    assert "error" not in sends[0].output["result"]
    assert sends[1].output["result"]["error"]["code"] == "approval_rejected"
    assert "too chatty" in sends[1].output["result"]["error"]["message"]


async def test_notifications_go_out_by_smtp_once_with_their_id(
    mailing_engine: Engine, sink: SmtpSink
) -> None:
    engine = mailing_engine
    await engine.accounts.upsert("acme", name="Acme", owner="dana@acme.example")
    model = replies(
        calls(
            ("send_notification", {"channel": "email", "to": "account_owner", "message": "Pricing concern"})
        ),
        calls(("send_notification", {"channel": "in_app", "to": "dana", "message": "FYI"})),
        calls(("send_notification", {"channel": "email", "to": "not an address", "message": "x"})),
    )
    await engine.publish_workflow(agent_workflow())
    async with running_worker(engine, model=model):
        await engine.events.publish(
            [{"topic": "meeting.note", "message_id": "n1", "account_id": "acme", "data": {}}]
        )
        for _ in range(200):
            found = await engine.list_runs(workflow="meeting-follow-up")
            if found and found[0].status.is_terminal:
                break
            await asyncio.sleep(0.05)
        await wait_for_mail(sink, 1)
    (run,) = found
    assert run.status == "completed"
    (message,) = sink.messages
    assert message.rcpt_tos == ["dana@acme.example"] and "Pricing concern" in message.body
    rows = await engine.db.pool.fetch("SELECT id, channel, status FROM notifications ORDER BY channel")
    assert [(r["channel"], r["status"]) for r in rows] == [("email", "sent"), ("in_app", "sent")]
    email_id = next(r["id"] for r in rows if r["channel"] == "email")
    assert str(email_id) in message.message_id
    refused = [
        s for s in await engine.list_steps(run.id) if s.kind == "agent.tool" and s.output.get("refused")
    ]
    assert [s.output["result"]["error"]["code"] for s in refused] == ["bad_recipient"]


async def test_the_workspace_daily_budget_suspends_runs(engine: Engine) -> None:
    await engine.governance.set_budget(daily_usd=None, daily_tokens=1)
    await engine.publish_workflow(agent_workflow())
    model = replies(calls(("create_task", {"title": "one"})), calls(("create_task", {"title": "two"})))
    async with running_worker(engine, model=model):
        run = await engine.start_run("meeting-follow-up", {})
        suspended = await until(engine, run.id, lambda r: r.status == "suspended")
    assert suspended.status_reason == "budget_workspace_tokens"
    assert "daily tokens" in suspended.error["message"]
    assert [t.title for t in await engine.tasks.list(run_id=run.id)] == ["one"]
    used = await engine.governance.budget()
    assert used["model_calls"] == 1 and used["input_tokens"] > 0


async def test_the_api_lists_and_decides_approvals(engine: Engine) -> None:
    await engine.publish_workflow(agent_workflow(approvals=["create_task"]))
    model = replies(calls(("create_task", {"title": "needs a yes"})))
    app = create_app(engine)
    async with (
        running_worker(engine, model=model),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client,
    ):
        run = await engine.start_run("meeting-follow-up", {})
        await until(engine, run.id, lambda r: r.status_reason == "awaiting_approval")
        listed = (await client.get("/api/approvals")).json()
        assert [a["tool"] for a in listed] == ["create_task"]
        approval_id = listed[0]["id"]
        assert (await client.get("/api/approvals/not-a-uuid")).json()["error"]["code"] == "approval_not_found"
        bad = await client.post(f"/api/approvals/{approval_id}/approve", json={"arguments_hash": "f" * 64})
        assert (bad.status_code, bad.json()["error"]["code"]) == (409, "approval_mismatch")
        ok = await client.post(
            f"/api/approvals/{approval_id}/approve", json={"arguments_hash": listed[0]["arguments_hash"]}
        )
        assert ok.status_code == 200 and ok.json()["status"] == "approved"
        again = await client.post(f"/api/approvals/{approval_id}/reject", json={})
        assert (again.status_code, again.json()["error"]["code"]) == (409, "approval_decided")
        await until(engine, run.id, lambda r: r.status.is_terminal)
        assert [t.title for t in await engine.tasks.list(run_id=run.id)] == ["needs a yes"]
        resume = await client.post(f"/api/runs/{run.id}/resume", json={"add": {"tokens": 5}})
        assert (resume.status_code, resume.json()["error"]["code"]) == (409, "run_not_suspended")
        budget = await client.put("/api/budget", json={"daily_usd": 2.5})
        assert budget.status_code == 200 and budget.json()["daily_usd"] == 2.5
        bad_budget = await client.put("/api/budget", json={"daily_usd": -1})
        assert bad_budget.status_code == 422
        notes = await client.get("/api/notifications")
        assert notes.status_code == 200 and notes.json() == []


async def test_another_workspace_sees_and_decides_nothing(engine: Engine) -> None:
    import uuid

    other = uuid.uuid4()
    await engine.db.pool.execute("INSERT INTO workspaces (id, name) VALUES ($1, 'b')", other)
    await engine.publish_workflow(agent_workflow(approvals=["create_task"]))
    model = replies(calls(("create_task", {"title": "mine"})))
    app = create_app(engine)
    async with (
        running_worker(engine, model=model),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://localhost",
            headers={"X-Agentflow-Workspace": str(other)},
        ) as foreign,
    ):
        run = await engine.start_run("meeting-follow-up", {})
        await until(engine, run.id, lambda r: r.status_reason == "awaiting_approval")
        (request,) = await engine.governance.approvals()
        assert (await foreign.get("/api/approvals")).json() == []
        for path in (f"/api/approvals/{request['id']}", f"/api/approvals/{request['id']}/approve"):
            response = await (
                foreign.get(path) if path.endswith(str(request["id"])) else foreign.post(path, json={})
            )
            assert (response.status_code, response.json()["error"]["code"]) == (404, "approval_not_found")
        resumed = await foreign.post(f"/api/runs/{run.id}/resume", json={})
        assert (resumed.status_code, resumed.json()["error"]["code"]) == (404, "run_not_found")
        assert (await foreign.get("/api/notifications")).json() == []
        assert (await foreign.get("/api/budget")).json()["model_calls"] == 0
        still = await engine.governance.approval(request["id"])
        assert still["status"] == "pending"


async def test_the_gate_counts_in_the_daily_budget_and_is_not_asked_past_it(engine: Engine) -> None:
    await engine.governance.set_budget(daily_usd=None, daily_tokens=1)
    await engine.publish_workflow(
        agent_workflow(
            "gated", sources=[{"type": "email"}], gate={"on_error": "skip"}, prompt="Watch pricing emails."
        )
    )
    email = {"topic": "email.received", "account_id": "acme", "data": {"body": "pricing is too high"}}
    async with running_worker(engine):
        await engine.events.publish([{**email, "message_id": "e1"}])
        for _ in range(200):
            if (await engine.governance.budget())["model_calls"] >= 1:
                break
            await asyncio.sleep(0.05)
        await engine.events.publish([{**email, "message_id": "e2"}])
        for _ in range(200):
            rows = await engine.db.pool.fetch(
                "SELECT event_message_id, decision, reason FROM dispatch_decisions"
            )
            if len(rows) == 2 and all(r["decision"] != "gate_pending" for r in rows):
                break
            await asyncio.sleep(0.05)
    by_event = {r["event_message_id"]: r for r in rows}
    assert by_event["e1"]["decision"] == "started" and by_event["e1"]["reason"]["gate"]["input_tokens"] > 0
    assert by_event["e2"]["decision"] == "gate_declined"
    assert "daily tokens" in by_event["e2"]["reason"]["gate"]["reason"]
    assert by_event["e2"]["reason"]["gate"]["error"] == "gate_unavailable"
    used = await engine.governance.budget()
    assert used["input_tokens"] >= by_event["e1"]["reason"]["gate"]["input_tokens"]


async def test_a_slack_notification_is_posted_through_the_guarded_client(database_url: str) -> None:
    from tests.support.recording_server import RecordingServer

    with RecordingServer() as slack:
        settings = make_settings(database_url, http_allow="127.0.0.1")
        engine = await Engine.connect(settings, migrate_schema=False)
        try:
            hook = f"{slack.url}/services/T000/B000/XXXX"
            actions = {"send_notifications": {"enabled": True, "slack_webhook_url": hook}}
            await engine.publish_workflow(agent_workflow(actions=actions))
            note = {
                "channel": "slack",
                "to": "#cs-alerts",
                "subject": "Churn risk",
                "message": "Globex at risk",
            }
            async with running_worker(engine, model=replies(calls(("send_notification", note)))):
                run = await engine.start_run("meeting-follow-up", {})
                await until(engine, run.id, lambda r: r.status.is_terminal)
                for _ in range(100):
                    if slack.calls():
                        break
                    await asyncio.sleep(0.05)
            (row,) = await engine.db.pool.fetch("SELECT id, status FROM notifications")
        finally:
            await engine.close()
    (call,) = slack.calls()
    assert call.path == "/services/T000/B000/XXXX"
    assert "Globex at risk" in call.body["text"] and "Churn risk" in call.body["text"]
    assert call.key == str(row["id"]) and row["status"] == "sent"
