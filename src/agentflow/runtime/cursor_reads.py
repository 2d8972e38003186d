"""What a worker reads into a run's cursor between its steps: how far the run's loops are, and
the deliveries that arrived while a step ran. Everything else a step needs its checkpoint
returned, so a step reads nothing more."""

from __future__ import annotations

from dataclasses import replace

import asyncpg

from agentflow.core.records import RunRecord
from agentflow.runtime import step
from agentflow.store import inbox, loops, runs


async def count_loops(pool: asyncpg.Pool, run: RunRecord, cursor: step.Cursor) -> step.Cursor:
    """The cursor with how far the items of the run's running loops are, as the database
    counts them, and the run's count of ended children as of that count."""
    running = [(o["seq"], o["total"]) for o in cursor.state["loops"]]
    counted = await loops.progress(pool, run.workspace_id, run.id, running)
    return replace(cursor, loops=counted.loops, children_seen=counted.children_ended)


async def refresh(
    pool: asyncpg.Pool, run: RunRecord, cursor: step.Cursor, done: runs.Checkpointed
) -> step.Cursor:
    """The cursor with the inbox loaded again when deliveries arrived during the step (and
    an agent run's tasks to be read again: each change to one is such a delivery)."""
    if done.inbox_seq > cursor.inbox.seen:
        fresh = await inbox.load(pool, run.workspace_id, run.id)
        agent = cursor.agent.without_tasks() if cursor.agent is not None else None
        return replace(cursor, inbox=fresh, agent=agent)
    return cursor
