"""Rich renderings of runs and their step timelines (shared by ``runs`` and ``demo``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from rich import box
from rich.table import Table

from agentflow.core.records import RunRecord, StepRecord

STATUS_STYLE = {
    "completed": "green",
    "failed": "red",
    "canceled": "yellow",
    "waiting": "cyan",
    "in_progress": "blue",
    "created": "white",
    "suspended": "magenta",
}


def status_text(status: str) -> str:
    """A status in its colour."""
    return f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]"


def short(value: Any, width: int = 60) -> str:
    """Compact JSON, cut to ``width`` characters."""
    if value is None:
        return ""
    text = json.dumps(value, default=str, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "…"


def runs_table(runs: list[RunRecord], workflow_names: Mapping[UUID, str]) -> Table:
    """One row per run: its whole id (what ``runs show`` takes), workflow and version, status
    (and why), completed steps, and when it was created."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    # The id never shrinks: a cut id cannot be pasted back. On a narrow terminal the other
    # columns wrap instead.
    table.add_column("run", no_wrap=True, min_width=36)
    table.add_column("workflow", overflow="fold")
    table.add_column("status", overflow="fold")
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("created", no_wrap=True)
    for run in runs:
        name = workflow_names.get(run.workflow_id, str(run.workflow_id))
        status = status_text(run.status) + (f"\n[dim]{run.status_reason}[/]" if run.status_reason else "")
        created = run.created_at.astimezone().strftime("%H:%M:%S")
        table.add_row(str(run.id), f"{name} v{run.workflow_version}", status, str(run.step_seq), created)
    return table


def timeline(run: RunRecord, steps: list[StepRecord]) -> Table:
    """The run's steps in order, with offsets from the run's creation."""
    table = Table(title=f"run {run.id}: {status_text(run.status)}", title_justify="left")
    table.add_column("+time", justify="right", width=8)
    table.add_column("#", justify="right", width=3)
    table.add_column("node (kind)", overflow="ellipsis", max_width=30)
    table.add_column("try", justify="right", width=3)
    table.add_column("status", width=9)
    table.add_column("ms", justify="right", width=6)
    table.add_column("output / error", overflow="ellipsis", max_width=70)
    for s in steps:
        offset = (s.started_at - run.created_at).total_seconds()
        error = f"{s.error.get('code')}: {s.error.get('message', '')}" if s.error else None
        detail = (error if len(error) <= 60 else error[:59] + "…") if error else _detail(s)
        label = (
            f"{s.node_id} ({s.name or s.kind})"
            if s.node_id
            else f"{s.kind.removeprefix('agent.')} {s.name or ''}"
        )
        table.add_row(
            f"{offset:.3f}s", str(s.seq), label, str(s.attempt),
            status_text(s.status), f"{s.duration_ms:.1f}", detail,
        )  # fmt: skip
    return table


def _detail(step: StepRecord) -> str:
    """What a step did, shortly: an agent decision shows the calls it made."""
    out = step.output
    if step.kind == "agent.decide" and isinstance(out, dict):
        names = [c.get("name", "?") for c in out.get("tool_calls", [])]
        return f"→ {', '.join(names)}" if names else short(out.get("content"), 60)
    if step.kind == "agent.tool" and isinstance(out, dict):
        return short(out.get("result"), 60)
    return short(out, 60)
