"""Agents whose model does not act: text answers are nudged, then fail with a reason; tool
calls refused again and again stop the run instead of spending its budget."""

from __future__ import annotations

from typing import Any

from agentflow.core.agent_context import NUDGE
from agentflow.core.chat import Message, ModelRequest
from agentflow.core.records import RunRecord, StepRecord
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from tests.support.agents import agent_workflow, calls, replies, running_worker, until

TALK = Message("assistant", "I would create a task for the SSO guide.")


async def finish(
    engine: Engine, model: ScriptedProvider, **config: Any
) -> tuple[RunRecord, list[StepRecord]]:
    await engine.publish_workflow(agent_workflow(**config))
    async with running_worker(engine, model=model):
        run = await engine.start_run("meeting-follow-up", {"note": "from the meeting"})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    return done, await engine.list_steps(done.id)


async def test_a_text_answer_is_nudged_once_and_the_model_then_acts(engine: Engine) -> None:
    model = replies(TALK, calls(("create_task", {"title": "Send the SSO guide"})))
    done, steps = await finish(engine, model)
    assert done.status == "completed", done.error
    assert len(await engine.tasks.list(run_id=done.id)) == 1
    first = steps[0]
    assert first.kind == "agent.decide" and first.output["on_text"] == "nudged"
    second: ModelRequest = model.requests[1]
    assert second.messages[-2] == TALK and second.messages[-1] == Message("user", NUDGE)


async def test_a_second_text_answer_after_the_nudge_fails_the_run_with_a_reason(engine: Engine) -> None:
    model = ScriptedProvider(lambda request: TALK)
    done, steps = await finish(engine, model)
    assert done.status == "failed"
    assert done.status_reason == "agent_no_action"
    error = done.error
    assert error["code"] == "agent_no_action" and "after being told to use its tools" in error["message"]
    assert "on_text: complete" in error["solution"]
    assert [s.output["on_text"] for s in steps] == ["nudged", "failed"]
    assert len(model.requests) == 2, "told once, then stopped"


async def test_on_text_fail_fails_at_the_first_text_answer(engine: Engine) -> None:
    model = ScriptedProvider(lambda request: TALK)
    done, _ = await finish(engine, model, on_text="fail")
    assert done.status == "failed" and done.error["code"] == "agent_no_action"
    assert "after being told" not in done.error["message"]
    assert len(model.requests) == 1


async def test_calls_refused_again_and_again_stop_the_run_before_its_budget(engine: Engine) -> None:
    wrong = calls(("create_task", {"titel": "typo"}))  # breaks the schema every time
    model = ScriptedProvider(lambda request: wrong)
    done, steps = await finish(engine, model)
    assert done.status == "failed" and done.status_reason == "agent_stuck"
    assert done.error["details"]["refused_in_row"] == 5
    refused = [s for s in steps if s.kind == "agent.tool"]
    assert len(refused) == 5 and all(s.output.get("refused") for s in refused)
    assert len(model.requests) == 5, "far below the default 25 model calls"
    assert steps[-1].kind == "agent.stuck"


async def test_a_call_that_works_resets_the_count_of_refusals(engine: Engine) -> None:
    wrong = calls(("create_task", {"titel": "typo"}))
    script = [wrong] * 4 + [calls(("create_task", {"title": "ok"}))] + [wrong] * 4
    model = replies(*script)  # then complete
    done, _ = await finish(engine, model)
    assert done.status == "completed", done.error
