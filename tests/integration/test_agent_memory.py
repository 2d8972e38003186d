"""Agent memory end to end on the real database (issue 12): an agent remembers, per key, what
earlier runs were told, said and did; each step stores only its own messages, with its
checkpoint; older messages fold into a summary; what a decision loads stays bounded."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.core.chat import Message, ModelRequest
from agentflow.core.errors import ConfigError
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from agentflow.runtime.scheduler import Scheduler
from agentflow.store import checkpoints
from tests.support.agents import agent_workflow, calls, running_worker, until

MEMORY = {"id": "notes", "type": "memory", "key": "{{ payload.customer }}", "window": 6}


def graph(memory: dict[str, Any] | None = MEMORY, **agent: Any) -> dict[str, Any]:
    node = {
        "id": "helper",
        "type": "agent",
        "prompt": "Help {{ payload.customer }} with: {{ payload.ask }}",
        "actions": {"create_tasks": {"enabled": True}},
        "attach": ["notes"] if memory is not None else [],
        **agent,
    }
    nodes = [node, {"id": "done", "type": "finish", "output": "{{ input.summary }}"}]
    if memory is not None:
        nodes.insert(1, memory)
    return {"name": "remembering", "kind": "structured", "nodes": nodes}


class Recorder:
    """A scripted model that creates one task named after the ask, then completes, and keeps
    every request (the summary calls apart)."""

    def __init__(self) -> None:
        self.decisions: list[ModelRequest] = []
        self.summaries: list[ModelRequest] = []
        self.provider = ScriptedProvider(self.respond)

    def respond(self, request: ModelRequest) -> Message:
        if not request.tools:
            self.summaries.append(request)
            return Message("assistant", f"summary #{len(self.summaries)}: the customer asked for help")
        self.decisions.append(request)
        made = [c.name for m in request.messages if m.role == "assistant" for c in m.tool_calls]
        if not made:
            ask = request.messages[0].content.split("Help ", 1)[1].split("\n", 1)[0]
            return calls(("create_task", {"title": f"task for {ask}"}))
        return calls(("complete", {"summary": "done"}))

    def memory_section(self, index: int) -> str:
        system = self.decisions[index].messages[0].content
        return (
            system.split("## Memory of earlier runs", 1)[1] if "## Memory of earlier runs" in system else ""
        )


async def run_once(engine: Engine, model: Recorder, customer: str, ask: str) -> Any:
    async with running_worker(engine, model=model.provider):
        run = await engine.start_run("remembering", {"customer": customer, "ask": ask})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    return done


async def stored(engine: Engine, key: str) -> list[Any]:
    return await engine.db.pool.fetch(
        "SELECT seq, role, content, run_id, step_seq, created_at, expires_at FROM memory_messages"
        " WHERE namespace = 'remembering' AND memory_key = $1 ORDER BY seq",
        key,
    )


async def test_an_agent_node_remembers_earlier_runs_for_the_same_key_only(engine: Engine) -> None:
    model = Recorder()
    await engine.publish_workflow(graph())
    await run_once(engine, model, "Ann", "the SSO rollout")
    await run_once(engine, model, "Ann", "the invoice")
    await run_once(engine, model, "Bob", "the export")
    assert model.memory_section(0) == "", "nothing remembered before the first run"
    second = model.memory_section(2)  # Ann's second run, first decision
    assert "Help Ann with: the SSO rollout" in second, "the first run's opening is remembered"
    assert "called create_task" in second and "task for Ann with: the SSO rollout" in second
    assert "create_task:" in second, "tool results are part of memory"
    assert "called complete" in second
    assert model.memory_section(4) == "", "Bob's run does not see Ann's memory"
    rows = await stored(engine, "Ann")
    # Per run: the opening, decision 1 (create_task), its result, decision 2 (complete), its result.
    assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant", "tool"] * 2
    assert len({r["run_id"] for r in rows}) == 2
    steps = {(r["run_id"], r["step_seq"]) for r in rows}
    assert len(steps) == 8, "each step stored its own messages, once"


async def test_each_step_stores_only_its_own_messages_however_long_the_history(engine: Engine) -> None:
    model = Recorder()
    await engine.publish_workflow(graph(memory={**MEMORY, "window": 4}))
    added = []
    for n in range(6):
        before = await engine.db.pool.fetchval(
            "SELECT coalesce(sum(octet_length(content)), 0) FROM memory_messages"
        )
        done = await run_once(engine, model, "Ann", f"ask {n}")
        after = await engine.db.pool.fetchval(
            "SELECT coalesce(sum(octet_length(content)), 0) FROM memory_messages"
        )
        added.append(after - before)
        child = await engine.db.pool.fetchval("SELECT id FROM runs WHERE parent_run_id = $1", done.id)
        sizes = await engine.db.pool.fetchval(
            "SELECT sum(pg_column_size(s.*)) FROM run_steps s WHERE run_id = $1", child
        )
        assert sizes < 6_000, "a step row never carries the remembered history"
    assert max(added) - min(added) <= 20, f"each run adds the same few bytes: {added}"
    loaded = [len(model.memory_section(2 * n)) for n in range(6)]
    assert loaded[-1] <= loaded[3] + 120, f"what a decision loads stops growing: {loaded}"


async def test_older_messages_fold_into_a_summary_written_with_the_step(engine: Engine) -> None:
    model = Recorder()
    await engine.publish_workflow(graph(memory={**MEMORY, "window": 4}))
    for n in range(3):  # the third run's first decision finds 10 messages: 6 older than its window
        await run_once(engine, model, "Ann", f"ask {n}")
    summary = await engine.db.pool.fetchrow(
        "SELECT through_seq, summary, expires_at - updated_at AS kept FROM memory_summaries"
        " WHERE memory_key = 'Ann'"
    )
    assert summary is not None and summary["summary"] == "summary #1: the customer asked for help"
    assert str(summary["kept"]).startswith("90 days")
    assert len(model.summaries) == 1
    asked = model.summaries[0].messages[1].content
    assert "Help Ann with: ask 0" in asked, "the oldest turns are what is folded"
    rows = await stored(engine, "Ann")
    assert summary["through_seq"] == rows[5]["seq"], "it folds the 6 messages older than the window"
    third = model.memory_section(4)
    assert "Summary of older turns:\nsummary #1" in third
    assert third.count("\n- [") == 4, "the window: 4 messages verbatim"
    child = await engine.db.pool.fetchval(
        "SELECT c.id FROM runs c JOIN runs p ON c.parent_run_id = p.id ORDER BY c.created_at DESC LIMIT 1"
    )
    first = (await engine.list_steps(child))[0]
    assert first.input["memory"] == {"key": "Ann", "loaded": 4, "summary": True, "folded": 6}
    run = await engine.get_run(child)
    assert any(c["calls"] == 3 for c in run.costs), "the summary call is counted with the decision's"


async def test_an_agent_workflow_remembers_under_a_key_from_its_run(engine: Engine) -> None:
    config = agent_workflow(
        "agent-with-memory",
        prompt="Help the customer.",
        memory={"key": "{{ payload.customer }}", "namespace": "shared-notes", "retention": "2h"},
    )
    await engine.publish_workflow(config)
    model = ScriptedProvider(lambda request: calls(("complete", {"summary": "nothing to do"})))
    async with running_worker(engine, model=model):
        for _ in range(2):
            run = await engine.start_run("agent-with-memory", {"customer": "Ann", "note": "hello"})
            await until(engine, run.id, lambda r: r.status.is_terminal)
    rows = await engine.db.pool.fetch(
        "SELECT role, content, expires_at - created_at AS kept FROM memory_messages"
        " WHERE namespace = 'shared-notes' AND memory_key = 'Ann' ORDER BY seq"
    )
    assert [r["role"] for r in rows] == ["user", "assistant", "tool"] * 2
    assert '"note":"hello"' in rows[0]["content"], "an agent workflow's opening is what started it"
    assert str(rows[0]["kept"]).startswith("2:00:00")


async def test_a_key_that_renders_empty_fails_the_agent_with_what_to_fix(engine: Engine) -> None:
    model = Recorder()
    await engine.publish_workflow(graph(memory={**MEMORY, "key": "{{ payload.nobody | default('') }}"}))
    async with running_worker(engine, model=model.provider):
        run = await engine.start_run("remembering", {"customer": "Ann", "ask": "x"})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "failed"
    assert done.error["code"] == "memory_key_invalid"
    assert "conversation" in done.error["solution"]


async def test_a_checkpoint_that_lost_its_lease_remembers_nothing(engine: Engine) -> None:
    model = Recorder()
    await engine.publish_workflow(graph())
    done = await run_once(engine, model, "Ann", "x")
    child = await engine.db.pool.fetchrow(
        "SELECT workspace_id, id, fencing_token FROM runs WHERE parent_run_id = $1", done.id
    )
    doc = {"namespace": "remembering", "key": "Ann", "role": "user", "content": "stale", "retention": 60}
    held = await checkpoints.checkpoint(
        engine.db.pool, child["workspace_id"], child["id"], child["fencing_token"] + 1, "ghost",
        checkpoints.RunWrite("completed", None, {}, None, None, True),
        checkpoints.StepWrite(99, 1, None, "agent.decide", "x", "completed", None, None, None, 0.0),
        checkpoints.Effects(memory=[doc]),
    )  # fmt: skip
    assert held is None
    assert "stale" not in [r["content"] for r in await stored(engine, "Ann")]


async def test_publishing_refuses_misattached_memory_with_the_path(engine: Engine) -> None:
    unattached = graph()
    unattached["nodes"][0]["attach"] = []
    with pytest.raises(ConfigError) as caught:
        await engine.publish_workflow(unattached)
    assert caught.value.info.details["errors"][0]["path"] == "nodes[1]"
    assert "only attached to an agent" in caught.value.info.details["errors"][0]["message"]
    linked = graph()
    linked["edges"] = [{"from": "helper", "to": "notes"}, {"from": "helper", "to": "done"}]
    with pytest.raises(ConfigError) as caught:
        await engine.publish_workflow(linked)
    assert "no link may lead to or from it" in str(caught.value.info.details["errors"])
    bad_key = graph(memory={**MEMORY, "key": "{{ payload.customer "})
    with pytest.raises(ConfigError) as caught:
        await engine.publish_workflow(bad_key)
    assert caught.value.info.details["errors"][0]["path"].startswith("nodes[1].key")


async def test_the_api_reads_pages_of_a_memory_and_forgets_it(engine: Engine) -> None:
    model = Recorder()
    await engine.publish_workflow(graph())
    for n in range(2):
        await run_once(engine, model, "Ann & Co/EU", f"ask {n}")
    app = create_app(engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
        where = {"namespace": "remembering", "key": "Ann & Co/EU"}
        page = await http.get("/api/memory", params={**where, "limit": 6})
        assert page.status_code == 200, page.text
        body = page.json()
        assert body["messages_total"] == 10 and len(body["messages"]) == 6
        assert body["messages"][0]["seq"] > body["messages"][-1]["seq"], "newest first"
        rest = await http.get("/api/memory", params={**where, "before": body["next_before"]})
        assert len(rest.json()["messages"]) == 4 and rest.json()["next_before"] is None
        assert (await http.get("/api/memory", params={**where, "namespace": "bad name!"})).status_code == 422
        gone = await http.delete("/api/memory", params=where)
        assert gone.json() == {"deleted_messages": 10}
        missing = await http.get("/api/memory", params=where)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "memory_not_found"
        other = await http.get(
            "/api/memory", params=where, headers={"X-Agentflow-Workspace": str(uuid.uuid4())}
        )
        assert other.status_code in (403, 404)


async def test_expired_memory_is_deleted_by_the_scheduler(engine: Engine) -> None:
    model = Recorder()
    await engine.publish_workflow(graph(memory={**MEMORY, "retention": "1h"}))
    await run_once(engine, model, "Ann", "x")
    await run_once(engine, model, "Bob", "y")
    kept = await engine.db.pool.fetchval(
        "SELECT bool_and(expires_at - created_at = interval '1 hour') FROM memory_messages"
    )
    assert kept, "each message expires its workflow's retention after it was written"
    await engine.db.pool.execute(
        "UPDATE memory_messages SET expires_at = now() - interval '1 second' WHERE memory_key = 'Ann'"
    )
    assert await Scheduler(engine.db).expire_memory() == 5
    assert await stored(engine, "Ann") == []
    assert len(await stored(engine, "Bob")) == 5, "what has not expired stays"


async def _seed_turns(engine: Engine, key: str, count: int) -> None:
    """``count`` messages of earlier runs on ``key``, as steps would have written them."""
    await engine.db.pool.execute(
        "INSERT INTO memory_messages (workspace_id, namespace, memory_key, run_id, step_seq, role,"
        " content, expires_at)"
        " SELECT (SELECT id FROM workspaces ORDER BY created_at LIMIT 1), 'remembering', $1,"
        "        gen_random_uuid(), 0, (ARRAY['user', 'assistant', 'tool'])[1 + n % 3],"
        "        'turn ' || lpad(n::text, 6, '0') || ': ' || repeat('x', 200), now() + interval '1 day'"
        " FROM generate_series(1, $2) AS n",
        key,
        count,
    )


async def test_ten_thousand_turns_on_one_key_stay_linear_in_storage_and_bounded_in_context(
    engine: Engine,
) -> None:
    per_message = []
    for added, total in ((1_000, 1_000), (4_000, 5_000), (5_000, 10_000)):
        await _seed_turns(engine, "Ann", added)
        size = await engine.db.pool.fetchval(
            "SELECT sum(pg_column_size(m.*)) FROM memory_messages m WHERE memory_key = 'Ann'"
        )
        per_message.append(size / total)
    assert max(per_message) - min(per_message) < 1, f"bytes per message stay flat: {per_message}"
    await engine.db.pool.execute("ANALYZE memory_messages")
    plan = "\n".join(
        r[0]
        for r in await engine.db.pool.fetch(
            "EXPLAIN SELECT seq FROM memory_messages WHERE workspace_id = (SELECT id FROM workspaces LIMIT 1)"
            " AND namespace = 'remembering' AND memory_key = 'Ann' AND seq > 0"
            " AND run_id <> gen_random_uuid() AND expires_at > now() ORDER BY seq DESC LIMIT 20"
        )
    )
    assert "Index Scan Backward" in plan, f"the window is read from the index's end: {plan}"
    model = Recorder()
    await engine.publish_workflow(graph(memory={**MEMORY, "window": 20}))
    await run_once(engine, model, "Ann", "the 10,001st turn")
    memory = model.memory_section(0)
    assert memory.count("\n- [") == 20, "the window, however long the history"
    assert "Summary of older turns:" in memory
    bound = 20 * 2_000 + 4_000 + 500
    assert len(memory) < bound and len(model.decisions[0].messages[0].content) < bound + 2_000
    first, second = model.summaries  # one per decision while a backlog is left
    assert first.messages[1].content.count("\n- [") == 4 * 20, "a summary folds at most four windows"
    assert "turn 000001" in first.messages[1].content, "oldest first"
    assert "turn 000081" in second.messages[1].content and "turn 000080" not in second.messages[1].content
    assert "summary #1" in second.messages[1].content, "each summary folds the one before"
