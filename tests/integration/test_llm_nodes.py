"""The ``llm`` node end to end on the real database: prompts from the run's data, answers checked
against an output schema, tokens and cost on the step, the run and the workspace's day."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from agentflow.core.chat import Message, ModelRequest
from agentflow.engine import Engine
from agentflow.llm.base import ModelError
from agentflow.llm.scripted import ScriptedProvider, estimate_usage
from agentflow.runtime import pure_steps
from agentflow.store import agent_reads
from tests.conftest import make_settings
from tests.support.agents import running_worker, until
from tests.support.vendor_servers import Reply, openai_completion, vendor_server

TRIAGE = {
    "type": "object",
    "properties": {
        "priority": {"type": "string", "enum": ["low", "high"]},
        "reason": {"type": "string"},
    },
    "required": ["priority"],
    "additionalProperties": False,
}
TICKET = {"customer": "Ann", "text": "Our invoices are wrong again and the CFO is furious."}


def flow(name: str, *nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "nodes": list(nodes), **extra}


def triage(**extra: Any) -> dict[str, Any]:
    return {
        "id": "triage",
        "type": "llm",
        "system": "You triage support tickets for {{ payload.customer }}.",
        "prompt": "Ticket: {{ payload.text }}",
        "output_schema": TRIAGE,
        **extra,
    }


async def finished(engine: Engine, model: ScriptedProvider, name: str, payload: Any) -> Any:
    async with running_worker(engine, model=model):
        run = await engine.start_run(name, payload)
        return await until(engine, run.id, lambda r: r.status.is_terminal)


async def test_an_llm_node_answers_from_rendered_prompts_and_records_its_spend(engine: Engine) -> None:
    model = ScriptedProvider.from_replies(["Dear Ann, we are sorry about the invoices."])
    await engine.publish_workflow(
        flow(
            "reply-draft",
            {"id": "draft", "type": "llm", "model": "scripted:writer", "temperature": 0.2, "top_p": 0.9,
             "max_tokens": 300, "stop": ["\n\n--"],
             "system": "Write for {{ payload.customer }}.", "prompt": "Answer: {{ payload.text }}"},
            {"id": "done", "type": "finish", "output": {"draft": "{{ input.text }}", "calls": "{{ input.usage.calls }}"}},
        )
    )  # fmt: skip
    done = await finished(engine, model, "reply-draft", TICKET)
    assert done.status == "completed", done.error
    assert done.output == {"draft": "Dear Ann, we are sorry about the invoices.", "calls": 1}
    sent = model.requests[0]
    assert [(m.role, m.content) for m in sent.messages] == [
        ("system", "Write for Ann."),
        ("user", f"Answer: {TICKET['text']}"),
    ]
    assert (sent.model, sent.temperature, sent.top_p, sent.max_output_tokens, sent.stop) == (
        "writer",
        0.2,
        0.9,
        300,
        ("\n\n--",),
    )
    assert sent.output_schema is None and sent.tools == ()
    expected = estimate_usage(sent, Message("assistant", "Dear Ann, we are sorry about the invoices."))
    step = next(s for s in await engine.list_steps(done.id) if s.node_id == "draft")
    assert step.kind == "llm" and step.name == "scripted:writer"
    assert (step.input_tokens, step.output_tokens) == (expected.input_tokens, expected.output_tokens)
    assert step.input["messages"][0] == {"role": "system", "content": "Write for Ann."}  # type: ignore[index]
    assert step.output["usage"]["input_tokens"] == expected.input_tokens  # type: ignore[index]
    run = await engine.get_run(done.id)
    assert (run.input_tokens, run.output_tokens) == (expected.input_tokens, expected.output_tokens)
    assert run.costs is not None and [c["calls"] for c in run.costs] == [1]
    spend = await engine.governance.budget()
    assert spend["input_tokens"] == expected.input_tokens and spend["model_calls"] == 1


async def test_an_answer_that_breaks_the_output_schema_is_sent_back_with_what_is_wrong(
    engine: Engine,
) -> None:
    model = ScriptedProvider.from_replies(
        ["Sure! It is urgent.", '{"priority": "urgent"}', '{"priority": "high", "reason": "billing"}']
    )
    await engine.publish_workflow(
        flow(
            "triage",
            triage(),
            {"id": "route", "type": "condition",
             "branches": [{"port": "high", "when": {"path": "input.data.priority", "op": "equals", "value": "high"}}]},
            {"id": "escalate", "type": "finish", "output": "escalated: {{ steps.triage.data.reason }}"},
            {"id": "queue", "type": "finish", "output": "queued"},
            edges=[
                {"from": "triage", "to": "route"},
                {"from": "route", "port": "high", "to": "escalate"},
                {"from": "route", "port": "default", "to": "queue"},
            ],
        )
    )  # fmt: skip
    done = await finished(engine, model, "triage", TICKET)
    assert done.status == "completed", done.error
    assert done.output == "escalated: billing"
    assert len(model.requests) == 3, "two bad answers, each sent back once"
    assert all(r.output_schema == TRIAGE for r in model.requests)
    second, third = model.requests[1].messages, model.requests[2].messages
    assert second[-2] == Message("assistant", "Sure! It is urgent.")
    assert "not JSON" in second[-1].content
    assert third[-2].content == '{"priority": "urgent"}'
    assert "priority: 'urgent' is not one of ['low', 'high']" in third[-1].content
    step = next(s for s in await engine.list_steps(done.id) if s.node_id == "triage")
    assert step.status == "completed" and step.attempt == 1, "the re-asks are one step"
    assert step.output["data"] == {"priority": "high", "reason": "billing"}  # type: ignore[index]
    assert step.output["usage"]["calls"] == 3  # type: ignore[index]
    run = await engine.get_run(done.id)
    assert run.costs is not None and run.costs[0]["calls"] == 3
    assert run.input_tokens == step.input_tokens > 0


async def test_an_answer_that_keeps_breaking_the_schema_fails_with_output_invalid_and_its_cost(
    engine: Engine,
) -> None:
    bad = ScriptedProvider(lambda request: Message("assistant", '{"priority": "maybe"}'))
    await engine.publish_workflow(flow("strict", triage(output_retries=1)))
    failed = await finished(engine, bad, "strict", TICKET)
    assert failed.status == "failed"
    assert failed.error["code"] == "output_invalid", failed.error
    assert "2 time(s)" in failed.error["message"] and "'maybe' is not one of" in failed.error["message"]
    assert len(bad.requests) == 2
    run = await engine.get_run(failed.id)
    assert run.costs is not None and run.costs[0]["calls"] == 2, "failed calls were paid for"
    assert run.input_tokens > 0

    # Down the error port the run goes on with the error as the node's output.
    await engine.publish_workflow(
        flow(
            "lenient",
            triage(output_retries=0),
            {"id": "done", "type": "finish", "output": "fallback: {{ input.code }}"},
            {"id": "never", "type": "finish", "output": "no"},
            edges=[{"from": "triage", "port": "error", "to": "done"}, {"from": "triage", "to": "never"}],
        )
    )
    handled = await finished(engine, bad, "lenient", TICKET)
    assert handled.status == "completed" and handled.output == "fallback: output_invalid"


async def test_model_errors_fail_or_retry_the_step_by_their_kind(engine: Engine) -> None:
    calls: list[str] = []

    def flaky(request: ModelRequest) -> Message:
        calls.append(request.model)
        if request.model == "busy" and len(calls) == 1:
            raise ModelError("model_rate_limited", "slow down")
        if request.model == "broken":
            raise ModelError("model_bad_request", "this model does not exist")
        return Message("assistant", "fine")

    model = ScriptedProvider(flaky)
    quick = {"max_attempts": 3, "initial_delay": "10ms", "max_delay": "20ms"}
    await engine.publish_workflow(
        flow("busy", {"id": "ask", "type": "llm", "model": "x:busy", "prompt": "hi", "retry": quick})
    )
    await engine.publish_workflow(
        flow("broken", {"id": "ask", "type": "llm", "model": "x:broken", "prompt": "hi", "retry": quick})
    )
    done = await finished(engine, model, "busy", {})
    assert done.status == "completed", done.error
    assert [s.status for s in await engine.list_steps(done.id) if s.node_id == "ask"] == [
        "failed",
        "completed",
    ]
    failed = await finished(engine, model, "broken", {})
    assert failed.status == "failed" and failed.error["code"] == "model_bad_request"
    assert "llm node 'ask'" in failed.error["message"]
    assert calls.count("broken") == 1, "a bad request is not retried"


async def test_a_spent_workspace_budget_stops_the_next_model_call(engine: Engine) -> None:
    model = ScriptedProvider(lambda request: Message("assistant", "x" * 400))
    await engine.publish_workflow(flow("chatty", {"id": "ask", "type": "llm", "prompt": "hi"}))
    await engine.governance.set_budget(daily_usd=None, daily_tokens=50)
    first = await finished(engine, model, "chatty", {})
    assert first.status == "completed", "the budget is checked before a call"
    second = await finished(engine, model, "chatty", {})
    assert second.status == "failed" and second.error["code"] == "budget_workspace_tokens"
    assert "retry the run" in second.error["solution"]
    assert len(model.requests) == 1


async def test_a_model_call_after_a_model_call_checks_the_spend_its_checkpoint_returned(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's next llm node does not read the workspace's spend again: the previous node's
    checkpoint returned it (with this commit's tokens), and it is still enforced."""
    reads: list[object] = []
    real = agent_reads.workspace_spend

    async def counted(pool: Any, workspace_id: Any) -> Any:
        reads.append(workspace_id)
        return await real(pool, workspace_id)

    monkeypatch.setattr(agent_reads, "workspace_spend", counted)
    model = ScriptedProvider(lambda request: Message("assistant", "x" * 40))
    asks = [
        {"id": f"ask{i}", "type": "llm", "prompt": "go on: {{ input.text | default('') }}"} for i in range(3)
    ]
    await engine.publish_workflow({**flow("three", *asks), "edges": [
        {"from": "ask0", "to": "ask1"}, {"from": "ask1", "to": "ask2"}]})  # fmt: skip
    done = await finished(engine, model, "three", {})
    assert done.status == "completed", done.error
    assert len(model.requests) == 3
    assert len(reads) == 1, "only the first node reads the spend; the others use their checkpoint's"

    # Enforced on the returned spend: the first node's tokens break the limit, the second stops.
    await engine.governance.set_budget(
        daily_usd=None, daily_tokens=done.input_tokens + done.output_tokens + 5
    )
    reads.clear()
    stopped = await finished(engine, model, "three", {})
    assert stopped.status == "failed" and stopped.error["code"] == "budget_workspace_tokens"
    assert [(s.node_id, s.status) for s in await engine.list_steps(stopped.id)] == [
        ("ask0", "completed"),
        ("ask1", "failed"),
    ]
    assert len(reads) == 1


async def test_llm_nodes_on_parallel_branches_each_record_their_spend(engine: Engine) -> None:
    model = ScriptedProvider(lambda request: Message("assistant", request.messages[-1].content.upper()))
    await engine.publish_workflow(
        flow(
            "both",
            {"id": "start", "type": "mapping", "output": {"text": "{{ payload.text }}"}},
            {"id": "a", "type": "llm", "prompt": "a: {{ input.text }}"},
            {"id": "b", "type": "llm", "prompt": "b: {{ input.text }}"},
            {"id": "join", "type": "merge"},
            {"id": "done", "type": "finish", "output": ["{{ input.a.text }}", "{{ input.b.text }}"]},
            edges=[{"from": "start", "to": "a"}, {"from": "start", "to": "b"},
                   {"from": "a", "to": "join"}, {"from": "b", "to": "join"}, {"from": "join", "to": "done"}],
        )
    )  # fmt: skip
    done = await finished(engine, model, "both", {"text": "hello"})
    assert done.status == "completed", done.error
    assert done.output == ["A: HELLO", "B: HELLO"]
    steps = [s for s in await engine.list_steps(done.id) if s.kind == "llm"]
    run = await engine.get_run(done.id)
    assert len(steps) == 2
    assert run.input_tokens == sum(s.input_tokens for s in steps)
    assert run.usd_cost == sum((s.usd_cost for s in steps), Decimal(0))
    assert run.costs is not None and run.costs[0]["calls"] == 2


async def test_an_llm_node_through_the_openai_sdk_sends_the_schema_and_prices_the_answer(
    database_url: str,
) -> None:
    async with vendor_server() as server:
        settings = make_settings(
            database_url, openai_api_key="sk-test", openai_base_url=f"{server.url}/v1", http_allow="127.0.0.1"
        )
        engine = await Engine.connect(settings, migrate_schema=False)
        try:
            server.queue(
                Reply(body=openai_completion('{"priority": "low"}', prompt_tokens=1000, completion_tokens=10))
            )
            await engine.publish_workflow(
                flow("sdk", triage(model="openai:gpt-4o-mini", temperature=0, top_p=0.5, stop=["END"]))
            )
            async with running_worker(engine):
                run = await engine.start_run("sdk", TICKET)
                done = await until(engine, run.id, lambda r: r.status.is_terminal)
            steps = await engine.list_steps(done.id)
        finally:
            await engine.close()
    assert done.status == "completed", done.error
    body = server.requests[0].body
    assert body["response_format"]["json_schema"]["schema"] == TRIAGE
    assert (body["temperature"], body["top_p"], body["stop"]) == (0, 0.5, ["END"])
    assert body["messages"][0] == {"role": "system", "content": "You triage support tickets for Ann."}
    step = next(s for s in steps if s.node_id == "triage")
    assert step.output["data"] == {"priority": "low"}  # type: ignore[index]
    assert (step.input_tokens, step.output_tokens, step.model) == (1000, 10, "openai:gpt-4o-mini")
    # gpt-4o-mini: $0.15 per million input tokens, $0.60 per million output tokens.
    assert step.usd_cost == Decimal(str(round((1000 * 0.15 + 10 * 0.60) / 1e6, 6)))
    assert body["messages"][1] == {"role": "user", "content": f"Ticket: {TICKET['text']}"}


async def test_offline_the_default_scripted_model_answers_llm_nodes_with_valid_data(engine: Engine) -> None:
    await engine.publish_workflow(
        flow("offline", triage(), {"id": "done", "type": "finish", "output": "{{ input.data.priority }}"})
    )
    async with running_worker(engine):  # no model given: the workflow's default, the scripted one
        run = await engine.start_run("offline", TICKET)
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    assert done.output == "low", "the first value the schema allows"


@pytest.mark.parametrize("ahead_secs", [60.0, 0.0], ids=["written-ahead", "each-in-full"])
async def test_a_run_that_calls_two_models_keeps_each_ones_spend_apart(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, ahead_secs: float
) -> None:
    # Written ahead, the run's costs are merged when its row catches up (RUN_USAGE_AHEAD); each
    # in full, by every checkpoint (RUN_USAGE, regrouping when the model changes).
    monkeypatch.setattr(pure_steps, "AHEAD_SECS", ahead_secs)
    model = ScriptedProvider.from_replies(["one", "two", "three", "four"])
    asks = [("a", "writer"), ("b", "editor"), ("c", "writer"), ("d", "writer")]
    await engine.publish_workflow(
        flow(
            "two-models",
            *(
                {"id": node, "type": "llm", "model": f"scripted:{name}", "prompt": "Go on."}
                for node, name in asks
            ),
        )
    )
    done = await finished(engine, model, "two-models", {})
    assert done.status == "completed", done.error
    steps = {s.node_id: s for s in await engine.list_steps(done.id)}
    run = await engine.get_run(done.id)
    assert run.costs is not None
    assert [(c["key_type"], c["calls"]) for c in run.costs] == [
        ("scripted:editor", 1),
        ("scripted:writer", 3),
    ]
    for cost in run.costs:
        mine = [steps[node] for node, name in asks if f"scripted:{name}" == cost["key_type"]]
        assert cost["input_tokens"] == sum(s.input_tokens for s in mine)
        assert cost["output_tokens"] == sum(s.output_tokens for s in mine)
        assert Decimal(str(cost["usd_cost"])) == sum((s.usd_cost for s in mine), Decimal(0))
    assert sum(c["input_tokens"] for c in run.costs) == run.input_tokens
