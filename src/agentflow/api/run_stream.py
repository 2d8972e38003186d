"""``GET /api/runs/{run_id}/stream``: follow any run of the workspace as server-sent events
(issue 12): its status, each step as it is checkpointed, and a model's text while it is written
(``stream: true`` on an ``llm`` or ``agent`` node, or an agent workflow). Resumable: send the
last event's id back as ``Last-Event-ID`` (or ``after``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated
from uuid import UUID

import orjson
from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from agentflow.api.deps import EngineDep, WorkspaceDep, run_ref
from agentflow.api.schemas import ERROR_RESPONSES
from agentflow.core.records import RunRecord
from agentflow.engine import Engine
from agentflow.run_streams import Cursor

router = APIRouter(prefix="/api/runs", tags=["runs"], responses={**ERROR_RESPONSES})

_EVENTS = """Events (`event:` names; `data:` is JSON; `id:` is the cursor):
`status` (`status`, `reason`) first and on every change; `step` (`seq`, `attempt`, `node_id`, `kind`,
`name`, `status`, `output`, `error`) per checkpointed step attempt; `delta` (`step`, `attempt`,
`text`) as a model writes; `restart` (`step`, `attempt`): the call began again, drop that step's
text; `end` (`status`) once the run has ended and everything before was sent."""


@router.get(
    "/{run_id}/stream",
    summary="Stream a run (server-sent events, resumable)",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": _EVENTS}},
)
async def stream_run_events(
    run_id: str,
    engine: EngineDep,
    workspace: WorkspaceDep,
    last_event_id: Annotated[str | None, Header(max_length=100, description="The last event's id.")] = None,
    after: Annotated[str | None, Query(max_length=100, description="Or the id to go on after.")] = None,
) -> StreamingResponse:
    """The run's events after the cursor, until it ends (or ten minutes pass: resume then);
    422 ``stream_cursor_invalid`` for an id this stream did not send; 404 ``run_not_found``."""
    cursor = Cursor.parse(last_event_id or after)
    run = await engine.get_run(run_ref(run_id), workspace_id=workspace)
    return StreamingResponse(
        _lines(engine, run, cursor, workspace),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _lines(engine: Engine, run: RunRecord, cursor: Cursor, workspace: UUID) -> AsyncIterator[str]:
    yield "retry: 1000\n\n"
    async for event in engine.streams.follow(run, cursor, workspace_id=workspace):
        if event is None:
            yield ": still here\n\n"
            continue
        data = orjson.dumps(event.data, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        yield f"id: {event.cursor}\nevent: {event.kind}\ndata: {data}\n\n"
