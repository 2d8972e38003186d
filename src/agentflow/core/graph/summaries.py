"""Per-node summaries of a run: what each node did, from its step rows and its frontier."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentflow.core.records import StepRecord


def node_summaries(steps: Sequence[StepRecord], skipped: Sequence[str]) -> dict[str, dict[str, Any]]:
    """For each node that ran or was skipped: ``status`` (``completed``, ``failed``: its last
    attempt failed, ``skipped``), ``attempts``, ``runs`` (completed executions: more than one
    for a node several branches lead to), ``started_at``, ``finished_at`` and ``duration_ms``
    (the sum of its attempts)."""
    found: dict[str, dict[str, Any]] = {}
    for step in steps:
        if step.node_id is None:
            continue
        entry = found.setdefault(
            step.node_id,
            {
                "status": step.status,
                "attempts": 0,
                "runs": 0,
                "started_at": step.started_at,
                "duration_ms": 0.0,
            },
        )
        entry["status"] = step.status
        entry["attempts"] += 1
        entry["runs"] += step.status == "completed"
        entry["finished_at"] = step.finished_at
        entry["duration_ms"] = round(entry["duration_ms"] + step.duration_ms, 3)
    for node_id in skipped:
        found.setdefault(node_id, {"status": "skipped", "attempts": 0, "runs": 0})
    return found
