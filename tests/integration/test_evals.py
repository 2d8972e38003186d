"""Evals (issue 16): recorded runs of an agent workflow are replayed against a candidate (a
version, a model); each recorded decision is asked again with the context the run had then,
and tools, arguments, endings and cost are compared; a gate makes it a CI check."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentflow.core.chat import Message, ModelRequest, ModelResponse, ToolCall, Usage
from agentflow.core.errors import ConfigError
from agentflow.core.evals import Gate
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from tests.support.agents import running_worker, until
from tests.support.cli import cli_env, run_cli

HELPER = {
    "name": "helper",
    "kind": "agent",
    "prompt": "Turn each request into a task for Dana, then finish.",
    "model": "openai:gpt-4o-mini",
    "actions": {"create_tasks": {"enabled": True}},
}
TASK = {"title": "Call Acme", "assignee": "dana@acme.example"}


def after_the_task(request: ModelRequest) -> bool:
    """The run has created its task (its result is in the context)."""
    return any("Call Acme" in m.content for m in request.messages if m.role != "system")


def call(name: str, arguments: dict[str, object]) -> Message:
    return Message("assistant", "", (ToolCall("c1", name, arguments),))


class Rule:
    """Creates the task, then completes; priced as the model it is asked for (1,000 in, 100 out)."""

    def __init__(self, *, first: Message | None = None) -> None:
        self.requests: list[ModelRequest] = []
        self.first = first

    def provider(self) -> ScriptedProvider:
        return ScriptedProvider(self.respond, name="openai")

    def respond(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if after_the_task(request):
            message = call("complete", {"summary": "task created"})
        else:
            message = self.first or call("create_task", TASK)
        return ModelResponse(message, Usage(1000, 100), request.model, "openai", finish_reason="tool_calls")


async def recorded(engine: Engine, runs: int = 2) -> None:
    """``runs`` runs of the helper, each: create the task, complete."""
    await engine.publish_workflow(HELPER)
    async with running_worker(engine, model=Rule().provider()):
        for n in range(runs):
            run = await engine.start_run("helper", {"request": f"request {n}"})
            done = await until(engine, run.id, lambda r: r.status.is_terminal)
            assert done.status == "completed", done.error


async def test_a_candidate_deciding_as_recorded_agrees_everywhere(engine: Engine) -> None:
    await recorded(engine)
    candidate = Rule()
    summary = await engine.evals.replay("helper", provider=candidate.provider(), gate=Gate(min_agreement=1.0))
    found = summary.to_json()
    assert (found["runs"], found["decisions"]) == (2, 4)
    assert (found["same_tools"], found["same_arguments"], found["same_ending"], found["same_outcome"]) == (
        1,
        1,
        1,
        1,
    )
    assert found["passed"] and found["cost_ratio"] == pytest.approx(1.0)
    # The second decision saw what the run had then: the task the first one created.
    second = candidate.requests[1]
    assert after_the_task(second) and not after_the_task(candidate.requests[0])


async def test_a_candidate_that_ends_early_misses_the_gate_and_says_where(engine: Engine) -> None:
    await recorded(engine, runs=1)
    hasty = Rule(first=call("complete", {"summary": "nothing to do"}))
    summary = await engine.evals.replay("helper", provider=hasty.provider(), gate=Gate(min_agreement=0.9))
    [first, second] = summary.comparisons
    assert ([n for n, _ in first.recorded], [n for n, _ in first.candidate]) == (
        ["create_task"],
        ["complete"],
    )
    assert not first.same_tools and not first.same_ending and second.same_tools and second.same_ending
    assert summary.share("same_tools") == 0.5
    assert summary.failures == ["the same tools in 50% of decisions, below 90%"]


async def test_a_new_version_and_a_pricier_model_are_what_the_candidate_decides_with(engine: Engine) -> None:
    await recorded(engine, runs=1)
    await engine.publish_workflow({**HELPER, "prompt": "Create the task for Dana; then complete, briefly."})
    candidate = Rule()
    summary = await engine.evals.replay(
        "helper", model="openai:gpt-4o", provider=candidate.provider(), gate=Gate(max_cost_ratio=2.0)
    )
    assert all("Create the task for Dana" in r.messages[0].content for r in candidate.requests)
    assert {r.model for r in candidate.requests} == {"gpt-4o"}
    # 1,000 tokens in and 100 out: $0.0035 on gpt-4o against $0.00021 on gpt-4o-mini.
    assert summary.cost_ratio == pytest.approx((2.50 + 1.0) / (0.15 + 0.06), rel=0.01)
    assert summary.failures == [f"cost {summary.cost_ratio:.2f}x the recorded, above 2.00x"]


async def test_what_cannot_be_evaluated_is_refused(engine: Engine) -> None:
    await engine.publish_workflow(
        {"name": "flat", "kind": "structured", "nodes": [{"id": "x", "type": "finish"}]}
    )
    with pytest.raises(ConfigError) as structured:
        await engine.evals.replay("flat")
    assert structured.value.code == "eval_invalid" and "agent workflows" in str(structured.value)
    await engine.publish_workflow(HELPER)
    with pytest.raises(ConfigError):
        await engine.evals.replay("helper", runs=0)


@pytest.fixture
async def recorded_runs(engine: Engine) -> Engine:
    await recorded(engine, runs=1)
    return engine


async def test_the_cli_replays_and_its_gate_fails_with_exit_1(
    recorded_runs: Engine, database_url: str, tmp_path: Path
) -> None:
    env = cli_env(database_url)
    report = tmp_path / "eval.json"
    broken = await asyncio.to_thread(
        run_cli,
        ["eval", "helper", "--model", "nosuch:model", "--min-agreement", "0.5", "--json", str(report)],
        env,
    )
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "the candidate's model failed on 2 decision(s)" in broken.stdout
    written = json.loads(report.read_text())
    assert written["decisions"] == 2 and not written["passed"]
    assert all(c["error"] and "model" in c["error"] for c in written["comparisons"])
    plain = await asyncio.to_thread(run_cli, ["eval", "helper", "--model", "scripted"], env)
    assert plain.returncode == 0 and "done (no gate set)" in plain.stdout, plain.stdout + plain.stderr
