"""Following a run list as it changes (issue 15): the runs a list's first page shows (a run
search's newest ``limit`` matches), as they appear, change and leave it.

Each look is the list's own indexed search, so following costs what reloading the list costs,
once a second per follower, and shows exactly what the list would. A run is "changed" when
what a list row shows of it changed: status, reason, step, attempt, tokens or cost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from uuid import UUID

from agentflow.core.frozen import frozen
from agentflow.core.records import RunRecord
from agentflow.core.run_filters import RunFilter

LOOK_SECONDS = 1.0
HEARTBEAT_SECONDS = 15.0
FOLLOW_SECONDS = 600.0
"""How long one connection lasts; the client reloads the list and follows again."""


@frozen
class ListChange:
    """The list as it is (``list``: first), a run that appeared on it or changed (``run``),
    or one that left it (``removed``)."""

    kind: str
    runs: tuple[RunRecord, ...] = ()
    run_id: UUID | None = None


def _shown(run: RunRecord) -> tuple[Any, ...]:
    return (
        run.status, run.status_reason, run.step_seq, run.attempt, run.input_tokens, run.output_tokens,
        run.usd_cost, run.completed_at, run.canceled_at,
    )  # fmt: skip


async def follow_list(
    search: Callable[[RunFilter], Awaitable[list[RunRecord]]],
    wanted: RunFilter,
    *,
    look_seconds: float = LOOK_SECONDS,
    lasts: float = FOLLOW_SECONDS,
) -> AsyncIterator[ListChange | None]:
    """The list ``wanted`` describes, then its changes; None now and then while nothing
    changes (a heartbeat)."""
    first = await search(wanted)
    yield ListChange("list", tuple(first))
    seen = {run.id: _shown(run) for run in first}
    ends = time.monotonic() + lasts
    quiet_since = time.monotonic()
    while time.monotonic() < ends:
        await asyncio.sleep(look_seconds)
        runs = await search(wanted)
        now = {run.id: _shown(run) for run in runs}
        changed = [run for run in reversed(runs) if seen.get(run.id) != now[run.id]]  # oldest first
        for run in changed:
            yield ListChange("run", (run,), run.id)
        for gone in seen.keys() - now.keys():
            yield ListChange("removed", run_id=gone)
        if changed or seen.keys() - now.keys():
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= HEARTBEAT_SECONDS:
            quiet_since = time.monotonic()
            yield None
        seen = now
