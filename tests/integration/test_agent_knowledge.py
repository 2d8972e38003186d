"""What a held agent run's worker knows for its next decision, against what a read would give.

The worker reads a run's history once (with the claim's begin, in the same statement, when the
run's next step is a decision) and then keeps the steps it checkpointed, canonical as a read
makes them; it keeps the tasks it read and those its checkpoints created, and reads them again
after a delivery (each change to a task is one).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import agentflow
from agentflow import StepContext
from agentflow.agent import loop
from agentflow.core.agent_knowledge import AgentKnowledge
from agentflow.core.chat import Message, ModelRequest
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from agentflow.store import agent_reads
from tests.support.agents import agent_workflow, calls, running_worker, until

ENGINE: dict[str, Engine] = {}


@agentflow.tool(name="test_complete_my_tasks")
async def complete_my_tasks(ctx: StepContext) -> dict[str, Any]:
    """Complete every task of the calling run, as a person would while the run goes on."""
    engine = ENGINE["engine"]
    done = [await engine.tasks.complete(t.id) for t in await engine.tasks.list(run_id=ctx.run_id)]
    return {"completed": len(done)}


def _stored(value: Any) -> bytes:
    return orjson.dumps(value, default=str)


class Reads:
    """Counts the decision reads and keeps what each decision knew before it read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.history_flags: list[bool] = []
        self.known: list[AgentKnowledge | None] = []
        self.begun = 0  # begins that read what the decision after them reads
        real_reads, real_known = agent_reads.decision_reads, loop._decision_reads
        real_begin = agent_reads.begin_reading

        async def begin(*args: Any) -> agent_reads.DecisionReads | None:
            self.begun += 1
            return await real_begin(*args)

        async def reads(*args: Any, history: bool = True) -> agent_reads.DecisionReads:
            self.history_flags.append(history)
            return await real_reads(*args, history=history)

        async def known(run: Any, env: Any, knowledge: Any, spend: Any) -> Any:
            self.known.append(knowledge)
            return await real_known(run, env, knowledge, spend)

        monkeypatch.setattr(agent_reads, "decision_reads", reads)
        monkeypatch.setattr(agent_reads, "begin_reading", begin)
        monkeypatch.setattr(loop, "_decision_reads", known)


async def test_a_held_agent_run_reads_its_history_once_and_keeps_it_as_a_read_gives_it(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = Reads(monkeypatch)
    script = [
        calls(("create_task", {"title": "First", "priority": "high", "due_in": "1d"})),
        calls(("create_task", {"title": "Second"}), ("create_task", {"title": "Third"})),
        calls(("complete", {"summary": "three tasks"})),
    ]
    model = ScriptedProvider(lambda request: script.pop(0))
    await engine.publish_workflow(agent_workflow())
    async with running_worker(engine, model=model):
        run = await engine.start_run("meeting-follow-up", {"note": "manual"})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    assert len(model.requests) == 3

    # The claim's begin read the history (and the rest) for the first decision: no decision
    # read it, and the first one knew the run already.
    assert reads.begun == 1
    assert reads.history_flags.count(True) == 0, reads.history_flags
    assert reads.known[0] is not None and reads.known[0].history == ()
    last = reads.known[-1]
    assert last is not None, "the third decision knew the run"

    # What it knew is what a read gives: the same steps with the same keys in the same order,
    # and the tasks as stored (the first read's none, then the three its checkpoints returned).
    stored = await agent_reads.history(engine.db.pool, run.workspace_id, run.id)
    decisions = [s.seq for s in stored if s.kind == "agent.decide"]
    before_last = [s for s in stored if s.seq < decisions[-1]]
    assert len(before_last) == 5  # decide, act, decide, act, act
    assert _stored([s.__dict__ for s in last.history]) == _stored([s.__dict__ for s in before_last])
    read = await agent_reads.decision_reads(engine.db.pool, run.workspace_id, run.id, None, history=False)
    assert last.tasks is not None and last.tasks[0]["title"] == "First"
    assert _stored(list(last.tasks)) == _stored(read.tasks)
    assert "Third" in model.requests[-1].messages[0].content, "the model saw the tasks it created"


async def test_a_task_changed_while_the_run_is_held_is_read_again_for_the_next_decision(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    ENGINE["engine"] = engine
    reads = Reads(monkeypatch)
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> Message:
        seen.append(request)
        if len(seen) == 1:
            return calls(("create_task", {"title": "Ship it"}))
        if len(seen) == 2:
            return calls(("test_complete_my_tasks", {}))
        return calls(("complete", {"summary": "done"}))

    await engine.publish_workflow(agent_workflow(tools=["test_complete_my_tasks"]))
    async with running_worker(engine, model=ScriptedProvider(respond)):
        run = await engine.start_run("meeting-follow-up", {"note": "manual"})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    assert len(seen) == 3
    # The third decision did not take the tasks as known: the change was delivered meanwhile.
    assert reads.known[-1] is not None and reads.known[-1].tasks is None
    assert reads.history_flags[-1] is False, "the history is still known"
    tasks_block = seen[-1].messages[0].content.split("## Tasks this run created")[1]
    assert '"status": "completed"' in tasks_block, tasks_block
