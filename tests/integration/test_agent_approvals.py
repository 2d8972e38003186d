"""Agents' tool approvals as requests: the approver is told, may edit the call (the edited call
is what runs), and the workflow declares how long a request waits and what its timeout does."""

from __future__ import annotations

import re
from typing import Any

import pytest

from agentflow.core.errors import ConfigError
from agentflow.engine import Engine
from agentflow.store import notifications
from tests.support.agents import (
    agent_workflow,
    calls,
    first_run,
    meeting_event,
    replies,
    running_worker,
    until,
)


def approving(**policy: Any) -> dict[str, Any]:
    return agent_workflow(approvals=["create_task"], approval=policy)


async def test_the_approver_is_emailed_and_an_edited_call_is_what_runs(engine: Engine) -> None:
    await engine.accounts.upsert("acme", name="Acme", owner="dana@acme.example")
    await engine.publish_workflow(approving(notify=["lee@example.com", "account_owner"]))
    model = replies(calls(("create_task", {"title": "Send the guide"})))
    async with running_worker(engine, model=model):
        await engine.events.publish([meeting_event(account="acme")])  # the run's account: acme
        run = await first_run(engine, "meeting-follow-up")
        await until(engine, run.id, lambda r: r.status_reason == "awaiting_approval")
        (request,) = await engine.requests.list(run_id=run.id)
        assert request["spec"] == {"allow_edits": True} and request["expires_at"] is not None
        notes = await notifications.list_notifications(engine.db.pool, run.workspace_id, run.id, 10)
        assert sorted(n["recipient"] for n in notes) == ["dana@acme.example", "lee@example.com"]
        assert all(n["subject"] == "Approval needed: create_task (meeting-follow-up)" for n in notes)
        # Each email carries its own link; lee's answers as lee, and the edited call is what runs.
        links = {
            n["recipient"]: re.search(r"/answer#request=([0-9a-f-]+)&token=(\S+)", n["body"]) for n in notes
        }
        assert all(found and found.group(1) == str(request["id"]) for found in links.values())
        lee = links["lee@example.com"]
        assert lee is not None and links["dana@acme.example"] is not None
        assert lee.group(2) != links["dana@acme.example"].group(2)
        edited = {"title": "Send the SSO guide today"}
        answered = await engine.requests.respond_by_link(
            request["id"], lee.group(2), approved=True, response=edited, reason=None
        )
        assert (answered["responded_by"], answered["responded_via"]) == ("lee@example.com", "email")
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    assert [t.title for t in await engine.tasks.list(run_id=run.id)] == ["Send the SSO guide today"]
    acted = [s for s in await engine.list_steps(run.id) if s.kind == "agent.tool"]
    assert acted[0].input == {"call_id": "c0", "arguments": edited, "edited": True}
    assert (await engine.requests.get(request["id"]))["response"] == edited


async def test_edits_are_refused_where_the_workflow_does_not_allow_them(engine: Engine) -> None:
    await engine.publish_workflow(approving(allow_edits=False))
    model = replies(calls(("create_task", {"title": "Send the guide"})))
    async with running_worker(engine, model=model):
        run = await engine.start_run("meeting-follow-up", {})
        await until(engine, run.id, lambda r: r.status_reason == "awaiting_approval")
        (request,) = await engine.requests.list(run_id=run.id)
        with pytest.raises(ConfigError, match="allow_edits") as refused:
            await engine.requests.respond(request["id"], approved=True, response={"title": "other"})
        assert refused.value.code == "response_invalid"
        assert (await engine.requests.get(request["id"]))["status"] == "pending", "nothing lost"
        await engine.requests.respond(request["id"], approved=True)
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert [t.title for t in await engine.tasks.list(run_id=run.id)] == ["Send the guide"]
    assert done.status == "completed"


@pytest.mark.parametrize(("on_timeout", "status"), [("fail", "failed"), ("reject", "completed")])
async def test_a_request_nobody_answers_follows_the_declared_timeout(
    engine: Engine, on_timeout: str, status: str
) -> None:
    await engine.publish_workflow(approving(timeout="1s", on_timeout=on_timeout))
    model = replies(calls(("create_task", {"title": "Send the guide"})))  # then complete
    async with running_worker(engine, model=model):
        run = await engine.start_run("meeting-follow-up", {})
        done = await until(engine, run.id, lambda r: r.status.is_terminal, timeout=30)
    assert done.status == status, done.error
    assert await engine.tasks.list(run_id=run.id) == []
    if on_timeout == "fail":
        assert done.error["code"] == "approval_expired" and "within 0:00:01" in done.error["message"]
    else:
        refused = [s for s in await engine.list_steps(run.id) if s.kind == "agent.tool"]
        assert refused[0].output["result"]["error"]["code"] == "approval_expired"


@pytest.mark.parametrize(
    ("policy", "words"),
    [({"timeout": "0s"}, "between 1s and 365d"), ({"notify": ["not-an-address"]}, "email addresses"),
     ({"on_timeout": "approve"}, "'reject' or 'fail'")],
)  # fmt: skip
async def test_an_approval_policy_is_checked_at_publish(
    engine: Engine, policy: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        await engine.publish_workflow(approving(**policy))
    assert words in str(info.value)
