"""Helpers for agent-run tests: workflow configs, a running worker, waiting for a run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID

from agentflow.core.chat import Message, ModelRequest, ToolCall
from agentflow.core.records import RunRecord
from agentflow.engine import DEFAULT_WORKSPACE, Engine
from agentflow.llm.base import ModelProvider
from agentflow.llm.scripted import ScriptedProvider
from agentflow.runtime.worker import Worker

TRANSCRIPT = """Weekly sync with Acme (renewal in 60 days).
Dana: the rollout to the EU team is blocked on SSO.
Action item: Send the SSO setup guide to Acme IT; owner: dana@acme.example; due: 2d; priority: high
Action item: Schedule an executive business review; owner: sam@vendor.example; due: 5d
Sam: we will also look at the pricing for the extra seats.
"""


def agent_workflow(name: str = "meeting-follow-up", **overrides: Any) -> dict[str, Any]:
    """An agent workflow started by meeting events, with every built-in action enabled."""
    config: dict[str, Any] = {
        "name": name,
        "kind": "agent",
        "prompt": "Turn the action items of customer meetings into tasks and follow them up until done.",
        "type": "event",
        "sources": [{"type": "meeting"}],
        "actions": {
            "create_tasks": {"enabled": True, "expiry": "7d"},
            "send_notifications": {"enabled": True},
            "follow_ups": {"enabled": True},
        },
    }
    config.update(overrides)
    return config


def meeting_event(
    message_id: str = "m-1", account: str = "acme", transcript: str = TRANSCRIPT
) -> dict[str, Any]:
    return {
        "topic": "meeting.completed",
        "message_id": message_id,
        "account_id": account,
        "data": {"title": "Acme weekly sync", "transcript": transcript},
    }


@asynccontextmanager
async def running_worker(
    engine: Engine, *, model: ModelProvider | None = None, **kwargs: Any
) -> AsyncIterator[Worker]:
    """A worker (with dispatch) running in the background until the block ends."""
    worker = engine.worker(concurrency=4, model=model, **kwargs)
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)


async def until(
    engine: Engine,
    run_id: UUID,
    check: Callable[[RunRecord], bool],
    timeout: float = 15.0,
    workspace_id: UUID = DEFAULT_WORKSPACE,
) -> RunRecord:
    deadline = time.monotonic() + timeout
    while True:
        run = await engine.get_run(run_id, workspace_id=workspace_id)
        if check(run):
            return run
        assert time.monotonic() < deadline, f"run stuck: {run.status} {run.status_reason} {run.error}"
        await asyncio.sleep(0.05)


async def first_run(engine: Engine, workflow: str, timeout: float = 15.0) -> RunRecord:
    deadline = time.monotonic() + timeout
    while True:
        found = await engine.list_runs(workflow=workflow)
        if found:
            return found[-1]
        assert time.monotonic() < deadline, "no run started"
        await asyncio.sleep(0.05)


def calls(*items: tuple[str, dict[str, Any]]) -> Message:
    """An assistant message calling tools in order."""
    return Message(
        "assistant", "", tuple(ToolCall(f"c{n}", name, args) for n, (name, args) in enumerate(items))
    )


def replies(*messages: Message) -> ScriptedProvider:
    """A scripted model that answers with ``messages`` in order (then completes)."""
    queue = list(messages)

    def respond(request: ModelRequest) -> Message:
        if queue:
            return queue.pop(0)
        return calls(("complete", {"summary": "script exhausted"}))

    return ScriptedProvider(respond)
