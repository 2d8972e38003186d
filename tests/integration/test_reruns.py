"""Rerunning an ended run from a chosen step (issue 15, the console's "rerun from a step"): a
new run starts where the old one stood when the step began; the steps completed by then are
copied, not done again; the rest runs again, on the same version or a newer one."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import pytest

import tests.support.tools  # noqa: F401  (registers flaky, echo, always_fails)
from agentflow.core.errors import ConfigError, ConflictError, NotFoundError
from agentflow.engine import Engine
from agentflow.runtime.worker import Worker
from tests.support import tools


def flow(name: str, *nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "nodes": list(nodes), **extra}


def counted(node: str, key: str, **extra: Any) -> dict[str, Any]:
    """A node whose tool counts its calls under ``key`` (in this process)."""
    return {"id": node, "type": "tool", "tool": "flaky", "args": {"key": key, "fail_times": 0}, **extra}


def billing(key: str, charge: dict[str, Any] | None = None) -> dict[str, Any]:
    return flow(
        "billing",
        counted("fetch", f"{key}:fetch"),
        charge or counted("charge", f"{key}:charge"),
        {
            "id": "done",
            "type": "finish",
            "output": {"fetched": "{{ steps.fetch.calls }}", "charged": "{{ input }}"},
        },
    )


def calls(key: str) -> int:
    return tools.CALLS.get(f"flaky:{key}", 0)


async def steps_of(engine: Engine, run_id: UUID) -> list[tuple[int, str | None, str]]:
    return [(s.seq, s.node_id, s.status) for s in await engine.list_steps(run_id)]


async def test_a_rerun_copies_the_steps_before_and_runs_the_rest_again(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(billing("a"))
    old = await engine.wait_for_run((await engine.start_run("billing", {"order": 7})).id, timeout=30)
    assert old.status == "completed" and (calls("a:fetch"), calls("a:charge")) == (1, 1)

    new = await engine.rerun(old.id, 1)
    assert new.id != old.id and new.rerun_of == {"run_id": str(old.id), "step": 1}
    done = await engine.wait_for_run(new.id, timeout=30)
    assert done.status == "completed", done.error
    assert (calls("a:fetch"), calls("a:charge")) == (1, 2), "fetch was copied, charge ran again"
    assert done.output == {"fetched": 1, "charged": {"calls": 2}}, "{{ steps.fetch }} reads the copy"
    assert done.input == old.input
    copied, *rest = await engine.list_steps(new.id)
    assert (copied.seq, copied.node_id, copied.output) == (0, "fetch", {"calls": 1})
    assert copied.idempotency_key == f"{new.id}:0"
    assert [(s.seq, s.node_id) for s in rest] == [(1, "charge"), (2, "done")]
    assert (done.input_tokens, done.usd_cost) == (0, 0)
    assert (await engine.get_run(old.id)).status == "completed", "the old run is left as it was"


async def test_a_failed_run_is_rerun_from_its_failed_step_on_a_fixed_version(
    engine: Engine, worker: Worker
) -> None:
    broken = {"id": "charge", "type": "tool", "tool": "always_fails", "args": {"retryable": False}}
    await engine.publish_workflow(billing("b", charge=broken))
    old = await engine.wait_for_run((await engine.start_run("billing", {})).id, timeout=30)
    assert old.status == "failed"
    fixed = await engine.publish_workflow(billing("b"))
    new = await engine.rerun(old.id, 1, version=fixed.version.version)
    done = await engine.wait_for_run(new.id, timeout=30)
    assert (done.status, done.workflow_version) == ("completed", fixed.version.version)
    assert (calls("b:fetch"), calls("b:charge")) == (1, 1)


async def test_a_rerun_inside_parallel_branches_runs_again_what_was_running(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(
        flow(
            "fan",
            counted("start", "c:start"),
            {"id": "slow", "type": "tool", "tool": "sleepy", "args": {"seconds": 0.3}},
            counted("quick", "c:quick"),
            {"id": "join", "type": "merge"},
            {"id": "done", "type": "finish", "output": "{{ input }}"},
            edges=[
                {"from": "start", "to": "slow"},
                {"from": "start", "to": "quick"},
                {"from": "slow", "to": "join"},
                {"from": "quick", "to": "join"},
                {"from": "join", "to": "done"},
            ],
        )
    )
    old = await engine.wait_for_run((await engine.start_run("fan", {})).id, timeout=30)
    by_node = {s.node_id: s.seq for s in await engine.list_steps(old.id)}
    from_join = await engine.wait_for_run((await engine.rerun(old.id, by_node["join"])).id, timeout=30)
    assert from_join.status == "completed"
    assert calls("c:quick") == 1, "every branch had ended before the join began: all copied"
    from_quick = await engine.wait_for_run((await engine.rerun(old.id, by_node["quick"])).id, timeout=30)
    assert from_quick.status == "completed"
    ran = [s.node_id for s in await engine.list_steps(from_quick.id)]
    assert ran.count("slow") == 1 and ran.count("quick") == 1 and calls("c:quick") == 2
    assert calls("c:start") == 1, "start ended before either branch began"


async def test_an_agent_run_is_rerun_from_a_decision_with_its_history(engine: Engine) -> None:
    from agentflow.core.chat import Message, ModelRequest
    from agentflow.llm.scripted import ScriptedProvider
    from tests.support.agents import agent_workflow, running_worker
    from tests.support.agents import calls as tool_calls

    asked: list[ModelRequest] = []

    def respond(request: ModelRequest) -> Message:
        asked.append(request)
        if not any(m.role == "tool" for m in request.messages):
            return tool_calls(("create_task", {"title": "Send the quote", "assignee": "dana"}))
        return tool_calls(("complete", {"summary": "done"}))

    await engine.publish_workflow(agent_workflow("follow-up"))
    async with running_worker(engine, model=ScriptedProvider(respond)):
        old = await engine.wait_for_run(
            (await engine.start_run("follow-up", {"meeting": "m1"})).id, timeout=30
        )
        decisions = [s.seq for s in await engine.list_steps(old.id) if s.kind == "agent.decide"]
        new = await engine.rerun(old.id, decisions[1])
        done = await engine.wait_for_run(new.id, timeout=30)
    assert done.status == "completed", done.error
    assert len(asked) == 3, "the rerun asked the model once, from the second decision"
    assert "Send the quote" in str([m.content for m in asked[2].messages]), "with the copied history"
    tasks = await engine.db.pool.fetchval("SELECT count(*) FROM tasks WHERE run_id = $1", new.id)
    assert tasks == 0, "the copied create_task is not done again"


async def test_what_cannot_be_rerun_is_refused_with_why(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(flow("nap", {"id": "sleep", "type": "wait", "duration": "1h"}))
    waiting = await engine.start_run("nap", {})
    for _ in range(200):
        if (await engine.get_run(waiting.id)).status == "waiting":
            break
        await asyncio.sleep(0.05)
    with pytest.raises(ConflictError) as active:
        await engine.rerun(waiting.id, 1)
    assert active.value.info.code == "run_not_ended"

    await engine.publish_workflow(billing("d"))
    old = await engine.wait_for_run((await engine.start_run("billing", {})).id, timeout=30)
    with pytest.raises(ConfigError) as first:
        await engine.rerun(old.id, 0)
    assert first.value.info.code == "step_invalid"
    with pytest.raises(NotFoundError) as missing:
        await engine.rerun(old.id, 99)
    assert missing.value.info.code == "step_not_found"
    with pytest.raises(ConfigError) as version:
        await engine.rerun(old.id, 1, version=9)
    assert version.value.info.code == "version_not_found"
    await engine.publish_workflow(flow("billing", counted("fetch", "d:fetch2")))
    with pytest.raises(ConflictError) as misfit:
        await engine.rerun(old.id, 1, version=2)
    assert misfit.value.info.code == "rerun_not_possible"
    assert (
        "node 'charge', which it runs next, is not in this version" in misfit.value.info.details["problems"]
    )


async def test_a_loop_running_at_that_point_is_refused_and_its_items_rerun_with_it(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(
        flow(
            "each",
            counted("prep", "e:prep"),
            {"id": "loop", "type": "for_each", "items": "{{ range(3) | list }}", "concurrency": 1},
            counted("item", "e:item"),
            {"id": "done", "type": "finish", "output": "{{ input | length }}"},
            edges=[
                {"from": "prep", "to": "loop"},
                {"from": "loop", "port": "iteration", "to": "item"},
                {"from": "loop", "port": "done", "to": "done"},
            ],
        )
    )
    old = await engine.wait_for_run((await engine.start_run("each", {})).id, timeout=30)
    assert old.status == "completed" and calls("e:item") == 3
    counts = [s.seq for s in await engine.list_steps(old.id) if s.node_id is None]
    assert counts, "the loop was counted while it ran"
    with pytest.raises(ConflictError) as refused:
        await engine.rerun(old.id, counts[0])
    assert "for_each loop" in refused.value.info.message
    item = await engine.db.pool.fetchval("SELECT id FROM runs WHERE parent_run_id = $1 LIMIT 1", old.id)
    with pytest.raises(ConflictError) as child:
        await engine.rerun(item, 1)
    assert child.value.info.code == "run_is_a_child"
    done = await engine.wait_for_run((await engine.rerun(old.id, 1)).id, timeout=30)
    assert done.status == "completed" and done.output == 3, "from the step that started the loop"
    assert (calls("e:prep"), calls("e:item")) == (1, 6), "its items ran again, prep did not"


async def test_the_api_reruns_and_answers_what_it_refuses_with_a_code(engine: Engine, worker: Worker) -> None:
    import httpx

    from agentflow.api.app import create_app

    await engine.publish_workflow(billing("f"))
    old = await engine.wait_for_run((await engine.start_run("billing", {})).id, timeout=30)
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as api:
        base = f"/api/ai/workflows/billing/runs/{old.id}/rerun"
        made = await api.post(base, json={"from_step": 1})
        assert made.status_code == 201, made.text
        assert made.json()["rerun_of"] == {"run_id": str(old.id), "step": 1}
        assert (await api.post(base, json={"from_step": 0})).status_code == 422
        assert (await api.post(base, json={"from_step": 1, "extra": True})).status_code == 422
        missing = await api.post(base, json={"from_step": 42})
        assert (missing.status_code, missing.json()["error"]["code"]) == (404, "step_not_found")
        await engine.publish_workflow(flow("other", counted("x", "f:x")))
        foreign = await api.post(f"/api/ai/workflows/other/runs/{old.id}/rerun", json={"from_step": 1})
        assert (foreign.status_code, foreign.json()["error"]["code"]) == (404, "run_not_found")
        audit = (await api.get("/api/audit", params={"action": "run.rerun"})).json()
    assert [entry["status"] for entry in audit["entries"]][-1] == 201
    done = await engine.wait_for_run(made.json()["id"], timeout=30)
    assert done.status == "completed"
