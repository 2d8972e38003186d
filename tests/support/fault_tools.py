"""Tools for the fault tests: each reports to the recording server.

Worker processes import this module (``agentflow worker --import tests.support.fault_tools``);
the recorder's URL comes from ``AGENTFLOW_TEST_RECORDER``. Bodies always carry ``run_id``,
``seq``, ``attempt``, ``fencing_token`` and ``pid`` so a test can tell attempts apart.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.error
import urllib.request
from typing import Any

import asyncpg

import agentflow
import tests.support.tools  # noqa: F401  (registers echo, add, make_task, ...)
from agentflow import StepContext

RECORDER_ENV = "AGENTFLOW_TEST_RECORDER"


def post(path: str, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    """POST JSON to the recorder (blocking); return its JSON answer (also for 409)."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    request = urllib.request.Request(
        os.environ[RECORDER_ENV] + path, json.dumps(body).encode(), headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        answer = json.loads(exc.read() or b"{}")
        answer["status"] = exc.code
    return answer


def about(ctx: StepContext, **extra: Any) -> dict[str, Any]:
    """The identity of this attempt, for the recorder."""
    return {
        "run_id": str(ctx.run_id),
        "seq": ctx.step_seq,
        "attempt": ctx.attempt,
        "fencing_token": ctx.fencing_token,
        "pid": os.getpid(),
        **extra,
    }


@agentflow.tool
def keyed_call(ctx: StepContext) -> dict[str, Any]:
    """An external call with the engine's idempotency key (the receiver drops repeats)."""
    answer = post("/keyed", about(ctx), key=ctx.idempotency_key)
    return {"key": ctx.idempotency_key, "applied": answer["applied"]}


@agentflow.tool
def unkeyed_call(ctx: StepContext) -> dict[str, Any]:
    """An external call without a key: at least once, repeats are not detectable."""
    post("/unkeyed", about(ctx))
    return {"sent": True}


@agentflow.tool
def checkpointed_task(ctx: StepContext, title: str) -> dict[str, Any]:
    """Ask for a task row written inside the checkpoint (exactly once)."""
    ctx.create_task(title, assignee="owner@example.com", metadata={"run": str(ctx.run_id)})
    return {"task": title}


@agentflow.tool
async def unsafe_task(ctx: StepContext, title: str, linger: float = 0.0) -> dict[str, Any]:
    """A deliberately broken engine-table write (negative control).

    It inserts its task row through its own connection, outside the checkpoint, so a
    crash between the insert and the checkpoint makes the retried step insert again. It
    tells the recorder (``/unsafe-task``) once the row is in, then lingers ``linger`` s.
    """
    conn = await asyncpg.connect(os.environ["AGENTFLOW_DATABASE_URL"])
    try:
        await conn.execute(
            "INSERT INTO tasks (workspace_id, id, run_id, title) VALUES ($1, gen_random_uuid(), $2, $3)",
            ctx.workspace_id,
            ctx.run_id,
            title,
        )
    finally:
        await conn.close()
    await asyncio.to_thread(post, "/unsafe-task", about(ctx))
    await asyncio.sleep(linger)
    return {"task": title}


@agentflow.tool
async def naive_keyed_call(ctx: StepContext, linger: float = 0.0) -> dict[str, Any]:
    """A deliberately broken keyed call (negative control): its key includes the fencing
    token, so it changes whenever the run is re-claimed and the receiver cannot drop the
    repeat. Lingers ``linger`` s after the call."""
    key = f"{ctx.idempotency_key}:{ctx.fencing_token}"
    answer = await asyncio.to_thread(post, "/keyed", about(ctx), key)
    await asyncio.sleep(linger)
    return {"key": key, "applied": answer["applied"]}


@agentflow.tool
async def slow_fenced(ctx: StepContext, seconds: float) -> dict[str, Any]:
    """Announce the attempt, sleep, then write to a fencing-aware receiver.

    The final write blocks the event loop on purpose: when the process was frozen past
    its lease, nothing else (such as a heartbeat) can interleave between the end of the
    sleep and the end of the step, so the worker does attempt its (stale) checkpoint.
    """
    post("/fenced-start", about(ctx), key=ctx.idempotency_key)
    await asyncio.sleep(seconds)
    answer = post("/fenced/write", about(ctx), key=ctx.idempotency_key)
    return {"accepted": answer.get("status", 200) == 200, "token": ctx.fencing_token}


@agentflow.tool
def fail_recorded(ctx: StepContext) -> None:
    """Record the attempt, then fail (retryable)."""
    post("/attempts", about(ctx, at=time.time()))
    raise RuntimeError(f"planned failure of attempt {ctx.attempt}")


@agentflow.tool
async def hang_async(ctx: StepContext, seconds: float) -> dict[str, Any]:
    """Record the start, then hang on the event loop for ``seconds``."""
    await asyncio.to_thread(post, "/hang", about(ctx, mode="async"))
    await asyncio.sleep(seconds)
    return {"hung": seconds}


@agentflow.tool
def hang_sync(ctx: StepContext, seconds: float) -> dict[str, Any]:
    """Record the start, then hang in a tool thread for ``seconds``."""
    post("/hang", about(ctx, mode="sync"))
    time.sleep(seconds)
    return {"hung": seconds}


@agentflow.tool
def poison(ctx: StepContext, delay: float = 0.3) -> None:
    """Record the attempt, wait ``delay`` seconds, then SIGKILL the worker (every time)."""
    post("/poison", about(ctx))
    time.sleep(delay)
    os.kill(os.getpid(), signal.SIGKILL)


@agentflow.tool
def interval(ctx: StepContext, seconds: float) -> dict[str, Any]:
    """Post ``start``, sleep, post ``end``: the recorder sees the execution interval."""
    post("/interval/start", about(ctx, key=ctx.idempotency_key))
    time.sleep(seconds)
    post("/interval/end", about(ctx, key=ctx.idempotency_key))
    return {"slept": seconds}
