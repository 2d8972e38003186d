"""Runs started by events carry the conversation their trigger names (issue 15): a trigger's
``conversation`` templates over the event give the run its ``{id, channel, title}``, so the run
list finds event-started runs by ``conversation_id`` and ``channel`` as it finds API-started
ones; with and without an enrollment key, through a debounce window, and refused clearly when
a template is malformed (at publish) or renders no conversation (the event's decision)."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.core.errors import ConfigError
from agentflow.core.run_filters import parse_run_filter
from agentflow.engine import Engine
from tests.integration.test_debounce import close_all
from tests.integration.test_dispatch import dispatch_all
from tests.support.agents import first_run


def support(**trigger: Any) -> dict[str, Any]:
    return {
        "name": "support",
        "kind": "structured",
        "trigger": {
            "topics": ["ticket.*"],
            "conversation": {
                "id": "{{ event.data.ticket_id | default('') }}",
                "channel": "email",
                "title": "{{ event.data.subject | default('') }}",
            },
            **trigger,
        },
        "nodes": [{"id": "done", "type": "finish", "output": "ok"}],
    }


def ticket(message_id: str, **data: Any) -> dict[str, Any]:
    return {"topic": "ticket.replied", "message_id": message_id, "data": data}


async def test_event_started_runs_carry_their_conversation(engine: Engine) -> None:
    await engine.publish_workflow(support(mode="parallel"))
    await engine.events.publish(
        [ticket("e1", ticket_id="T-7", subject="Refund please"), ticket("e2", note="x")]
    )
    await dispatch_all(engine)
    runs = {r.trigger["event"]["message_id"]: r for r in await engine.list_runs(workflow="support")}
    assert runs["e1"].conversation == {"id": "T-7", "channel": "email", "title": "Refund please"}
    assert runs["e2"].conversation is None, "an event that names no conversation starts a run without one"
    found = await engine.search_runs(parse_run_filter([("conversation_id", "T-7")]))
    assert [r.id for r in found] == [runs["e1"].id]
    assert [r.id for r in await engine.search_runs(parse_run_filter([("channel", "email")]))] == [
        runs["e1"].id
    ]


async def test_a_keyed_run_and_a_debounced_one_carry_it_too(engine: Engine) -> None:
    await engine.publish_workflow(support(enrollment={"key": "{{ event.data.ticket_id }}"}))
    debounced = support(debounce={"seconds": 60})
    debounced["name"] = "support-batched"
    await engine.publish_workflow(debounced)
    await engine.events.publish([ticket("k1", ticket_id="T-8", subject="Login")])
    await dispatch_all(engine)
    keyed = await first_run(engine, "support")
    assert keyed.enrollment_key == "T-8" and keyed.conversation == {
        "id": "T-8",
        "channel": "email",
        "title": "Login",
    }
    assert await engine.list_runs(workflow="support-batched") == [], "the window is open"
    await close_all(engine)
    batched = await first_run(engine, "support-batched")
    assert batched.conversation == {"id": "T-8", "channel": "email", "title": "Login"}


async def test_a_conversation_that_cannot_be_is_the_events_decision_and_bad_templates_are_refused(
    engine: Engine,
) -> None:
    bad = support()
    bad["trigger"]["conversation"]["channel"] = "{{ event.data.channel }}"
    published = await engine.publish_workflow(bad)
    await engine.events.publish([ticket("c1", ticket_id="T-9", channel="Email Support!")])
    await dispatch_all(engine)
    (decision,) = await engine.events.decisions(published.workflow.id)
    assert decision["decision"] == "key_error"
    assert decision["reason"]["code"] == "conversation_invalid"
    assert "trigger.conversation.channel" in decision["reason"]["message"]
    assert await engine.list_runs(workflow="support") == [], "no run without its conversation"
    broken = support()
    broken["trigger"]["conversation"]["id"] = "{{ event.data.ticket_id "
    assert "default" in support()["trigger"]["conversation"]["id"], (
        "optional fields say so (templates are strict)"
    )
    with pytest.raises(ConfigError) as refused:
        await engine.publish_workflow(broken)
    assert [e["path"] for e in refused.value.info.details["errors"]] == ["trigger.conversation.id"]
