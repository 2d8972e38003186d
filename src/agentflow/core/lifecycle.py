"""Lifecycle events (issue 16, seed 001): what happens to runs, published to the event log in
the same transaction as the change, so other workflows can trigger on them (an alerting
workflow is just a workflow).

Topics: ``run.started`` (its first step checkpointed), ``run.completed``, ``run.failed``,
``run.canceled`` (published by the cancel itself, ``store.runs.CANCELED_EVENT``),
``step.failed`` (an attempt failed; ``data.run_status`` says what the run does next) and
``request.created`` (a run asks a person, an outside system or an event). Message ids are
derived from what happened (``<run>``, ``<run>:<step>:<attempt>``, ``<request>``), so a
checkpoint written once publishes each once, and the log's key makes a repeat a no-op.

A run started by a lifecycle event publishes none itself, so a workflow that listens to
``run.failed`` cannot trigger itself for ever.
"""

from __future__ import annotations

from typing import Any

from agentflow.core.records import RunRecord

RUN_STARTED, RUN_COMPLETED, RUN_FAILED = "run.started", "run.completed", "run.failed"
RUN_CANCELED, STEP_FAILED, REQUEST_CREATED = "run.canceled", "step.failed", "request.created"
TOPICS = (RUN_STARTED, RUN_COMPLETED, RUN_FAILED, RUN_CANCELED, STEP_FAILED, REQUEST_CREATED)
"""Every lifecycle topic (``store.runs.CANCELED_EVENT`` names them too, in SQL)."""


def started_by_lifecycle(run: RunRecord) -> bool:
    """Whether ``run`` was started by a lifecycle event (it then publishes none)."""
    event = (run.trigger or {}).get("event")
    return isinstance(event, dict) and event.get("topic") in TOPICS


def lifecycle_events(
    run: RunRecord,
    *,
    status: str,
    reason: str | None,
    error: dict[str, Any] | None,
    step: dict[str, Any],
    request: dict[str, Any] | None,
    first_seq: int | None = None,
) -> list[dict[str, Any]]:
    """The events a checkpoint publishes: ``run`` moves to ``status`` (with ``reason``,
    ``error``) after ``step`` (``seq``, ``attempt``, ``node_id``, ``kind``, ``status``,
    ``error``), maybe asking ``request``. Each is ``{topic, message_id, data}``.
    ``first_seq``: the number of the first step it writes, when pure steps ran before
    ``step`` (``run.started`` goes with the checkpoint that writes step 0)."""
    if started_by_lifecycle(run):
        return []
    about = {
        "run_id": str(run.id),
        "workflow_id": str(run.workflow_id),
        "version": run.workflow_version,
        "account_id": run.account_id,
        "parent_run_id": None if run.parent_run_id is None else str(run.parent_run_id),
    }
    events: list[dict[str, Any]] = []
    if (step["seq"] if first_seq is None else first_seq) == 0 and run.started_at is not None:
        events.append(_event(RUN_STARTED, str(run.id), about))
    if step["status"] == "failed":
        key = f"{run.id}:{step['seq']}:{step['attempt']}"
        detail = {k: step[k] for k in ("seq", "attempt", "node_id", "kind", "error")}
        events.append(_event(STEP_FAILED, key, {**about, **detail, "run_status": status}))
    if request is not None:
        asked = {
            "request_id": request["id"],
            "kind": request.get("kind", "approval"),
            "node_id": request.get("node_id"),
        }
        events.append(_event(REQUEST_CREATED, request["id"], {**about, **asked}))
    if status == "completed":
        events.append(_event(RUN_COMPLETED, str(run.id), about))
    elif status == "failed":
        # A failed run can be retried and fail again: each failure is its own event.
        events.append(
            _event(RUN_FAILED, f"{run.id}:{step['seq']}", {**about, "reason": reason, "error": error})
        )
    return events


def _event(topic: str, message_id: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"topic": topic, "message_id": message_id, "data": data}
