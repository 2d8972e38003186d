"""Spans of the worker's companions: the dispatcher's batches, the scheduler's fires and
retention passes, the notifier's deliveries (OpenTelemetry; nothing while tracing is off).

A batch of events has no single parent: the dispatcher's span starts a trace of its own and
links to the spans the events were published in (the runs it starts continue those traces, see
``tracing``). A scheduled run is a child of the scheduler's span, a delivery a child of its
run's span.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanKind, Status, StatusCode

from agentflow.core.events import Event
from agentflow.runtime import tracing

MAX_LINKS = 64  # an event batch holds up to 500; the SDK keeps 128 links at most anyway


@contextmanager
def dispatch_span(batch: Sequence[Event]) -> Iterator[Span | None]:
    """The span of one batch the dispatcher decides, current while it does."""
    tracer = tracing.tracer()
    if tracer is None:
        yield None
        return
    links: list[Link] = []
    seen: set[str] = set()
    for event in batch:
        parent = tracing.parse_traceparent(event.trace_parent)
        if parent is not None and event.trace_parent not in seen and len(links) < MAX_LINKS:
            seen.add(str(event.trace_parent))
            links.append(Link(parent))
    attributes: dict[str, Any] = {
        "messaging.system": "agentflow",
        "messaging.operation.type": "process",
        "messaging.operation.name": "dispatch",
        "messaging.destination.name": "events",
        "messaging.batch.message_count": len(batch),
    }
    with tracer.start_as_current_span(
        "dispatch events", context=Context(), kind=SpanKind.CONSUMER, attributes=attributes, links=links
    ) as span:
        yield span


def count_decisions(span: Span | None, decided: Sequence[str]) -> None:
    """Name on the batch's span how many (event, workflow) pairs ended each way."""
    if span is None:
        return
    for decision, count in sorted(Counter(decided).items()):
        span.set_attribute(f"agentflow.dispatch.{decision}", count)


@contextmanager
def schedule_span(due: int) -> Iterator[Span | None]:
    """The span of one pass over due schedules; the runs it starts are its children."""
    tracer = tracing.tracer()
    if tracer is None or not due:
        yield None
        return
    with tracer.start_as_current_span(
        "fire schedules", context=Context(), attributes={"agentflow.schedules.due": due}
    ) as span:
        yield span


@contextmanager
def retention_span() -> Iterator[Span | None]:
    """The span of one retention pass (what it deleted: ``count_deleted``)."""
    tracer = tracing.tracer()
    if tracer is None:
        yield None
        return
    with tracer.start_as_current_span("prune history", context=Context()) as span:
        yield span


def count_deleted(span: Span | None, deleted: Mapping[str, int]) -> None:
    """Name on a retention pass's span how many rows of each kind it deleted."""
    if span is None:
        return
    for kind, count in deleted.items():
        span.set_attribute(f"agentflow.retention.{kind}", count)


@contextmanager
def delivery_span(row: Mapping[str, Any]) -> Iterator[Span | None]:
    """The span of one delivery attempt of a notification, under its run's span when it has
    one, current while it is sent (an outgoing webhook carries it as ``traceparent``)."""
    tracer = tracing.tracer()
    if tracer is None:
        yield None
        return
    run_id: UUID | None = row.get("run_id")
    context = (
        trace.set_span_in_context(
            NonRecordingSpan(tracing.run_span_context(run_id, row.get("run_trace_parent")))
        )
        if run_id is not None
        else Context()
    )
    attributes: dict[str, Any] = {
        "agentflow.notification.id": str(row["id"]),
        "agentflow.notification.channel": str(row["channel"]),
        "agentflow.notification.kind": str(row.get("kind") or ""),
        "agentflow.notification.attempt": int(row.get("attempts") or 1),
        "agentflow.workspace.id": str(row["workspace_id"]),
    }
    if run_id is not None:
        attributes["agentflow.run.id"] = str(run_id)
    with tracer.start_as_current_span(
        f"send {row['channel']}", context=context, kind=SpanKind.CLIENT, attributes=attributes,
        record_exception=False,
    ) as span:  # fmt: skip
        yield span


def end_delivery(span: Span | None, outcome: str, error_code: str | None = None) -> None:
    """Mark how a delivery attempt ended: ``sent``, ``retry`` or ``failed``."""
    if span is None:
        return
    span.set_attribute("agentflow.notification.outcome", outcome)
    if error_code is not None:
        span.set_attribute("error.type", error_code)
        span.set_status(Status(StatusCode.ERROR, error_code))
