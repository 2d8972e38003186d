"""Close debounce windows: one run (or one enrollment) per window, with all its events.

Called by the scheduler's time loop. Each call claims closed windows (``FOR UPDATE SKIP
LOCKED``, so any number of workers may run it), deletes them, starts or enrolls their run
and completes the events' ``debounced`` decisions with the run, in one transaction.
"""

from __future__ import annotations

from typing import Any

from agentflow.runtime.admission import start
from agentflow.runtime.configs import ConfigCache
from agentflow.runtime.lifecycle_listeners import LifecycleListeners
from agentflow.store import debounce, decisions, workflows
from agentflow.store.database import Connection

# Fields the window keeps beside each event document, for closing it.
_WINDOW_FIELDS = ("source", "enrollment_key", "conversation", "trace_parent")


async def close_windows(
    conn: Connection, configs: ConfigCache, limit: int, listeners: LifecycleListeners | None = None
) -> int:
    """Inside a transaction: handle up to ``limit`` closed windows; return how many. A run a
    ``restart`` replaces tells ``run.canceled`` when ``listeners`` say its workspace listens."""
    windows = await debounce.claim_closed(conn, limit)
    for window in windows:
        docs = [{k: v for k, v in e.items() if k not in _WINDOW_FIELDS} for e in window.events]
        refs = [(d["topic"], d["message_id"]) for d in docs]
        if not docs:
            continue
        last = window.events[-1]
        found = await workflows.resolve_live(
            conn, window.workspace_id, workflow_id=window.workflow_id, name=None
        )
        if found is None or not found[1]:
            await decisions.settle(
                conn, window.workspace_id, window.workflow_id, refs, "workflow_disabled", None, None,
                {"window": "the workflow was disabled or made a draft before its debounce window closed"},
            )  # fmt: skip
            continue
        version = found[0]
        config = configs.parse(version)
        trigger_doc: dict[str, Any] = {
            "source": last.get("source", "event"),
            "event": docs[-1],
            "debounced": {"key": window.debounce_key, "events": docs},
        }
        for carried in ("conversation", "trace_parent"):  # the last event's, as its data
            if last.get(carried):
                trigger_doc[carried] = last[carried]
        key = last.get("enrollment_key")
        tell = await listeners.telling_cancels(window.workspace_id) if listeners else None
        decision = await start(
            conn, version, config, key, docs[-1]["data"], trigger_doc, docs,
            {"debounce_key": window.debounce_key, "window_events": len(docs)}, tell,
        )  # fmt: skip
        await decisions.settle(
            conn, window.workspace_id, window.workflow_id, refs, None, key, decision.run_id,
            {"window_closed": {"outcome": decision.decision, "events": len(docs), "reason": decision.reason}},
        )  # fmt: skip
    return len(windows)
