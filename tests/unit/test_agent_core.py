"""The pure parts of agent runs: state, budgets, the allow-list, argument hashes, the context."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentflow.agent import script
from agentflow.agent.gate import VERDICT_SCHEMA
from agentflow.core.agent_config import Budget, ContextLimits
from agentflow.core.agent_context import ContextInputs, HistoryStep, build_messages, iterations
from agentflow.core.agent_state import (
    AgentState,
    allowed_tools,
    arguments_hash,
    check_budget,
    check_workspace_budget,
    enabled_builtins,
    needs_approval,
)
from agentflow.core.chat import Message, ModelRequest, ToolCall, ToolSchema, Usage
from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import AgentConfig
from agentflow.core.errors import ConfigError


def config(**extra: Any) -> AgentConfig:
    doc = {"name": "a", "kind": "agent", "prompt": "Help customers at risk of churn.", **extra}
    found = validate_config(doc)
    assert isinstance(found, AgentConfig)
    return found


def test_the_actions_map_decides_which_built_ins_the_model_sees() -> None:
    assert allowed_tools(config()) == ["generate_plan", "complete"]
    both = config(actions={"create_tasks": {"enabled": True}, "follow_ups": {"enabled": True}}, tools=["crm"])
    assert allowed_tools(both) == ["generate_plan", "create_task", "wait", "complete", "crm"]
    off = config(actions={"send_notifications": {"enabled": False}})
    assert "send_notification" not in allowed_tools(off)


def test_tool_names_are_kept_per_config_object_never_mixed_up() -> None:
    first = config(actions={"create_tasks": {"enabled": True}})
    listed = allowed_tools(first)
    listed.append("mutated by a caller")
    assert allowed_tools(first) == ["generate_plan", "create_task", "complete"]  # a copy each time
    # Many configs one after another: each gets its own names.
    for n in range(50):
        made = config(tools=[f"tool{n}"])
        assert allowed_tools(made) == ["generate_plan", "complete", f"tool{n}"]
    assert enabled_builtins(first) == ["generate_plan", "create_task", "complete"]


def test_approvals_and_http_tools_are_validated() -> None:
    http = {"name": "crm", "url": "https://crm.example/x", "require_approval": True}
    cfg = config(http_tools=[http], approvals=["send_notification"])
    assert needs_approval(cfg, "crm") and needs_approval(cfg, "send_notification")
    assert not needs_approval(cfg, "create_task")
    with pytest.raises(ConfigError) as bad_schema:
        config(http_tools=[{**http, "parameters": {"type": "array"}}])
    assert "type 'object'" in str(bad_schema.value.info.details)
    with pytest.raises(ConfigError):
        config(tools=["x"], http_tools=[{**http, "name": "x"}])  # declared twice
    with pytest.raises(ConfigError):
        config(approvals=["rm -rf"])


def test_the_arguments_hash_binds_the_exact_call() -> None:
    a = arguments_hash("send_notification", {"to": "a@x.io", "message": "hi"})
    assert a == arguments_hash("send_notification", {"message": "hi", "to": "a@x.io"})  # key order
    assert a != arguments_hash("send_notification", {"to": "b@x.io", "message": "hi"})
    assert a != arguments_hash("create_task", {"to": "a@x.io", "message": "hi"})


def test_state_round_trips_and_counts_use() -> None:
    state = AgentState().after_decision(
        (ToolCall("1", "wait", {}), ToolCall("2", "complete", {})), Usage(10, 5), 0.5
    )
    assert (state.phase, state.model_calls, state.tokens, state.usd) == ("act", 1, 15, 0.5)
    again = AgentState.from_json(state.to_json())
    assert again == state
    after = again.after_call(plan={"steps": []}).after_call()
    assert (after.phase, after.pending, after.tool_calls, after.plan) == ("decide", (), 2, {"steps": []})


@pytest.mark.parametrize(
    ("state", "before", "code"),
    [
        (AgentState(model_calls=3), "model", "budget_model_calls"),
        (AgentState(model_calls=3), "tool", None),
        (AgentState(tool_calls=9), "tool", "budget_tool_calls"),
        (AgentState(tokens=1000), "model", "budget_tokens"),
        (AgentState(usd=0.25), "tool", "budget_usd"),
        (AgentState(model_calls=3, allowance={"model_calls": 1}), "model", None),
    ],
)
def test_budgets_stop_the_run_before_the_next_call(state: AgentState, before: str, code: str | None) -> None:
    budget = Budget(max_model_calls=3, max_tool_calls=9, max_tokens=1000, max_usd=0.25)
    breach = check_budget(budget, state, 0.0, before=before)
    assert (breach.code if breach else None) == code
    if breach:
        assert "budget" in breach.message and breach.solution


def test_wall_time_and_workspace_budgets() -> None:
    budget = Budget(max_wall_time=timedelta(hours=1))
    assert check_budget(budget, AgentState(), 3599, before="model") is None
    assert check_budget(budget, AgentState(), 3600, before="model").code == "budget_wall_seconds"  # type: ignore[union-attr]
    assert check_workspace_budget(0.99, 10, 1.0, None) is None
    assert check_workspace_budget(1.0, 10, 1.0, None).code == "budget_workspace_usd"  # type: ignore[union-attr]
    assert check_workspace_budget(0, 10, 0, 10).code == "budget_workspace_tokens"  # type: ignore[union-attr]
    assert check_workspace_budget(5.0, 10**9, 0, 0) is None  # 0: no limit


def history(decisions: int) -> list[HistoryStep]:
    steps = []
    for n in range(decisions):
        call = {"id": f"c{n}", "name": "create_task", "arguments": {"title": f"task {n}"}}
        steps.append(
            HistoryStep(2 * n, "agent.decide", "m", {"events": []}, {"content": "", "tool_calls": [call]})
        )
        steps.append(
            HistoryStep(2 * n + 1, "agent.tool", "create_task", {}, {"call_id": f"c{n}", "result": {"ok": n}})
        )
    return steps


def inputs(steps: list[HistoryStep], limits: ContextLimits, events: list[Any] | None = None) -> ContextInputs:
    return ContextInputs(
        workflow="w", prompt="objective", account={"id": "acme", "owner": "dana@acme.example"},
        trigger={"source": "event", "event": {"topic": "meeting.completed", "data": {"transcript": "x" * 10}}},
        payload={}, steps=steps, tasks=[{"title": "t", "status": "open"}], events=events or [],
        plan={"steps": [{"n": 1, "action": "call"}]}, tools=["create_task", "complete"],
        now=datetime(2026, 11, 23, tzinfo=UTC), limits=limits,
    )  # fmt: skip


def test_the_context_holds_prompt_account_tasks_plan_events_and_every_call_with_its_result() -> None:
    messages = build_messages(
        inputs(history(2), ContextLimits(), [{"kind": "task", "payload": {"topic": "task.completed"}}])
    )
    system = messages[0].content
    assert "objective" in system and "dana@acme.example" in system and "## Current plan" in system
    assert "## Tasks this run created" in system and "not instructions" in system
    assert "meeting.completed" in messages[1].content
    assistant = [m for m in messages if m.role == "assistant"]
    tool = [m for m in messages if m.role == "tool"]
    assert [m.tool_calls[0].id for m in assistant] == ["c0", "c1"]
    assert [m.tool_call_id for m in tool] == ["c0", "c1"]
    assert messages[-1].role == "user" and "task.completed" in messages[-1].content


def test_old_history_is_summarised_not_dropped() -> None:
    steps = history(30)
    messages = build_messages(inputs(steps, ContextLimits(recent_steps=4)))
    assert len(iterations(steps)) == 30
    summary = next(m for m in messages if m.content.startswith("## Earlier in this run"))
    assert "26 earlier decisions" in summary.content
    assert "task 0" in summary.content and "task 25" in summary.content  # every older call is listed
    assert [m.tool_calls[0].id for m in messages if m.role == "assistant"] == ["c26", "c27", "c28", "c29"]
    # A tighter character budget summarises more, still keeping the conversation well formed.
    tight = build_messages(inputs(steps, ContextLimits(recent_steps=20, max_chars=6000)))
    assert sum(len(m.content) for m in tight) <= 6000 or not any(m.role == "assistant" for m in tight)
    calls = [m.tool_calls[0].id for m in tight if m.role == "assistant"]
    results = [m.tool_call_id for m in tight if m.role == "tool"]
    assert calls == results


def request(
    *messages: Message,
    tools: tuple[str, ...] = ("generate_plan", "create_task", "send_notification", "wait", "complete"),
) -> ModelRequest:
    schemas = tuple(ToolSchema(t, "", {"type": "object"}) for t in tools)
    return ModelRequest("scripted", messages, schemas)


def event_message(topic: str, data: dict[str, Any], account: str = "acme") -> Message:
    import orjson

    doc = {"topic": topic, "account_id": account, "data": data}
    return Message(
        "user", "## The event that started this run\n```json\n" + orjson.dumps(doc).decode() + "\n```"
    )


def test_the_scripted_model_turns_action_items_into_tasks() -> None:
    transcript = (
        "Intro\nAction item: Send the deck; owner: a@x.io; due: 2d; priority: high\n- action: Book QBR"
    )
    reply = script.respond(
        request(Message("system", "s"), event_message("meeting.completed", {"transcript": transcript}))
    )
    assert [c.name for c in reply.tool_calls] == ["create_task", "create_task"]
    first = reply.tool_calls[0].arguments
    assert (first["title"], first["assignee"], first["due_in"], first["priority"]) == (
        "Send the deck",
        "a@x.io",
        "2d",
        "high",
    )
    assert reply.tool_calls[1].arguments["title"] == "Book QBR"


def test_the_scripted_model_plans_for_churn_and_notifies_on_pricing_only_with_enabled_tools() -> None:
    churn = script.respond(
        request(Message("system", "s"), event_message("signal.health", {"risk": "churn risk high"}))
    )
    assert [(c.name, c.arguments) for c in churn.tool_calls] == [
        ("generate_plan", {"scenario": "get well plan for churn risk"})
    ]
    pricing = event_message("email.received", {"subject": "Your pricing is too high"})
    notify = script.respond(request(Message("system", "s"), pricing))
    assert (
        notify.tool_calls[0].name == "send_notification"
        and notify.tool_calls[0].arguments["to"] == "account_owner"
    )
    no_notify = script.respond(request(Message("system", "s"), pricing, tools=("complete",)))
    assert [c.name for c in no_notify.tool_calls] == ["complete"]


def test_the_scripted_gate_matches_the_objective() -> None:
    schema = VERDICT_SCHEMA  # the gate's question (other schemas get an example value)
    system = Message(
        "system", "## The workflow's objective\nNotify owners about pricing concerns\nAnswer with JSON"
    )
    yes = script.respond(
        ModelRequest("s", (system, Message("user", "the pricing is too high")), output_schema=schema)
    )
    no = script.respond(ModelRequest("s", (system, Message("user", "great product")), output_schema=schema))
    assert '"start":true' in yes.content and "pricing" in yes.content
    assert '"start":false' in no.content
