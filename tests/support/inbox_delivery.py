"""A tool that delivers an event to the calling run's inbox from another connection, as the
dispatcher or a task change would while the run goes on (set ``DELIVER_URL["url"]`` first)."""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

import agentflow
from agentflow import StepContext

DELIVER_URL: dict[str, str] = {}
NOTE = {"topic": "note.added", "data": {"text": "arrived meanwhile"}}


@agentflow.tool(name="test_deliver_to_my_inbox")
async def deliver_to_my_inbox(ctx: StepContext, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    """Deliver ``payload`` (default: a note) to the calling run's inbox, from outside."""
    conn = await asyncpg.connect(DELIVER_URL["url"])
    try:
        await conn.execute(
            "INSERT INTO run_inbox (workspace_id, run_id, kind, payload) VALUES ($1, $2, 'event', $3)",
            ctx.workspace_id, ctx.run_id, orjson.dumps(payload or NOTE).decode(),
        )  # fmt: skip
    finally:
        await conn.close()
    return {"delivered": True}
