"""Tools the tests register (workers in subprocesses import this module by name)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import datetime
from typing import Any

import agentflow
from agentflow import StepContext, StepFailure

CALLS: dict[str, int] = {}


def _count(name: str) -> int:
    CALLS[name] = CALLS.get(name, 0) + 1
    return CALLS[name]


@agentflow.tool
async def echo(value: Any = None) -> dict[str, Any]:
    """Return the value it was given."""
    return {"value": value}


@agentflow.tool
def add(a: int, b: int) -> int:
    """A sync tool: a + b."""
    return a + b


@agentflow.tool
async def flaky(key: str, fail_times: int) -> dict[str, int]:
    """Fail the first ``fail_times`` calls for ``key`` (in this process), then succeed."""
    n = _count(f"flaky:{key}")
    if n <= fail_times:
        raise RuntimeError(f"flaky failure {n}")
    return {"calls": n}


@agentflow.tool
async def fails_deep(depth: int = 12, wait_first: bool = False) -> None:
    """Raise from ``depth`` nested calls down (the innermost is ``innermost_helper``), after
    waiting once on the loop when ``wait_first``."""
    if wait_first:
        await asyncio.sleep(0)
    _descend(depth)


def _descend(depth: int) -> None:
    if depth <= 0:
        innermost_helper()
    _descend(depth - 1)


def innermost_helper() -> None:
    raise ValueError("broken deep inside")


@agentflow.tool
async def always_fails(code: str = "upstream_down", retryable: bool = True) -> None:
    """Fail every time with a structured error."""
    raise StepFailure(code, "the upstream is down", retryable=retryable, solution="Wait for it.")


@agentflow.tool
async def sleepy(seconds: float) -> dict[str, float]:
    """Sleep (async) for ``seconds``."""
    await asyncio.sleep(seconds)
    return {"slept": seconds}


@agentflow.tool
def blocking_sleep(seconds: float) -> dict[str, float]:
    """Sleep in a thread for ``seconds``."""
    time.sleep(seconds)
    return {"slept": seconds}


@agentflow.tool
def kill_worker() -> None:
    """Kill the worker process running it (a poison step)."""
    os.kill(os.getpid(), signal.SIGKILL)


@agentflow.tool
def make_task(ctx: StepContext, title: str, due: str | None = None) -> dict[str, Any]:
    """Create a task through the checkpoint (an engine-table write), due at ``due`` (ISO 8601)."""
    due_at = datetime.fromisoformat(due) if due else None
    ctx.create_task(title, assignee="owner@example.com", priority="high", due_at=due_at)
    return {"key": ctx.idempotency_key, "token": ctx.fencing_token}


@agentflow.tool
def bad_output() -> str:
    """Return text jsonb cannot store."""
    return "nul \u0000 here"
