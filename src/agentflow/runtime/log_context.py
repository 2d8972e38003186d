"""What a log line is about, and JSON lines that say it (issue 16).

A worker binds the run it drives (``bind_run``) and the step it runs (``bind_step``) in
context variables, which follow the run's asyncio task (and its tools: ``asyncio.to_thread``
copies them); ``JsonFormatter`` writes each record as one JSON object with them, so every line
a run causes names its ``run_id``, ``workflow_id``, ``workspace_id`` and ``step`` (and, while a
span is current, its ``trace_id`` and ``span_id``).
``configure_logging`` sets the root logger up: ``text`` (the default) or ``json``.
"""

from __future__ import annotations

import contextvars
import json
import logging
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

from agentflow.core.records import RunRecord

_RUN: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("agentflow_run", default=None)
_STEP: contextvars.ContextVar[int | None] = contextvars.ContextVar("agentflow_step", default=None)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def bind_run(run: RunRecord) -> None:
    """Name ``run`` on every log line of the current task from now on."""
    _RUN.set(
        {"run_id": str(run.id), "workflow_id": str(run.workflow_id), "workspace_id": str(run.workspace_id)}
    )
    _STEP.set(None)


def bind_step(seq: int) -> None:
    """Name step ``seq`` on the log lines of the current task from now on."""
    _STEP.set(seq)


def context() -> dict[str, Any]:
    """What the current task's log lines are about (empty outside a run)."""
    found: dict[str, Any] = dict(_RUN.get() or {})
    step = _STEP.get()
    if step is not None:
        found["step"] = step
    span = trace.get_current_span().get_span_context()
    if span.is_valid:  # a step's span (AGENTFLOW_TRACES), or the application's own
        found["trace_id"], found["span_id"] = f"{span.trace_id:032x}", f"{span.span_id:016x}"
    return found


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the run context, and the
    exception's type and text (the traceback only when the record asked for it)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line."""
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **context(),
        }
        if record.exc_info and record.exc_info[1] is not None:
            line["error"] = {"type": type(record.exc_info[1]).__name__, "message": str(record.exc_info[1])}
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(level: int, fmt: str) -> None:
    """Set the root logger up: ``text`` lines or ``json`` lines on stderr, at ``level``."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
