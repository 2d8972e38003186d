"""Spans of the worker's companions: the dispatcher's batches, the scheduler's fires and
retention passes, the notifier's deliveries, the gatekeeper's verdicts, the reply reader's
readings (OpenTelemetry; nothing while tracing is off).

A batch of events has no single parent: the dispatcher's span starts a trace of its own and
links to the spans the events were published in (the runs it starts continue those traces, see
``tracing``). A scheduled run is a child of the scheduler's span, a delivery a child of its
run's span. A gate's verdict continues the trace its event was published in, and the run it
starts is its child; reading a reply is a child of its request's run. The model calls they
make are their children (``model_timing``).
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
    context = _under_run(run_id, row.get("run_trace_parent"))
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
    _ended(span, "agentflow.notification.outcome", outcome, error_code)


@contextmanager
def gate_span(workflow: str, request: Any) -> Iterator[Span | None]:
    """The span of one gate verdict on a queued event (a ``store.gates.GateRequest``), in the
    trace the event was published in; current while the gate asks and the run starts."""
    tracer = tracing.tracer()
    if tracer is None:
        yield None
        return
    parent = tracing.parse_traceparent(request.trigger.get("trace_parent"))
    context = trace.set_span_in_context(NonRecordingSpan(parent)) if parent is not None else Context()
    attributes: dict[str, Any] = {
        "agentflow.workflow.name": workflow,
        "agentflow.workflow.id": str(request.workflow_id),
        "agentflow.workspace.id": str(request.workspace_id),
        "agentflow.event.topic": str(request.event.get("topic", "")),
        "agentflow.event.message_id": str(request.event.get("message_id", "")),
        "agentflow.gate.attempt": request.attempts,
    }
    with tracer.start_as_current_span(
        f"gate {workflow}", context=context, attributes=attributes, record_exception=False
    ) as span:
        yield span


def end_gate(span: Span | None, outcome: str, error_code: str | None = None) -> None:
    """Mark how a gate's turn ended: ``started``, ``declined``, ``retry`` (asked again later)
    or ``deleted``; ``error_code`` when the gate could not decide (a fallback, a retry)."""
    _ended(span, "agentflow.gate.outcome", outcome, error_code)


@contextmanager
def reply_span(
    reply: Mapping[str, Any], run_id: UUID | None, run_trace_parent: str | None
) -> Iterator[Span | None]:
    """The span of reading one reply to a person's request, under the request's run's span."""
    tracer = tracing.tracer()
    if tracer is None:
        yield None
        return
    context = _under_run(run_id, run_trace_parent)
    attributes: dict[str, Any] = {
        "agentflow.reply.id": str(reply["id"]),
        "agentflow.reply.via": str(reply["via"]),
        "agentflow.reply.attempt": int(reply.get("attempts") or 1),
        "agentflow.request.id": str(reply["request_id"]),
        "agentflow.workspace.id": str(reply["workspace_id"]),
    }
    if run_id is not None:
        attributes["agentflow.run.id"] = str(run_id)
    with tracer.start_as_current_span(
        "read reply", context=context, attributes=attributes, record_exception=False
    ) as span:
        yield span


def end_reply(span: Span | None, outcome: str, label: str | None, error_code: str | None = None) -> None:
    """Mark how a reading ended: ``answered``, ``held``, ``ignored``, ``late`` or ``retry``."""
    if span is not None and label is not None:
        span.set_attribute("agentflow.reply.label", label)
    _ended(span, "agentflow.reply.outcome", outcome, error_code)


def _under_run(run_id: UUID | None, run_trace_parent: str | None) -> Context:
    """A context whose current span is the run's (a trace of its own without a run)."""
    if run_id is None:
        return Context()
    return trace.set_span_in_context(NonRecordingSpan(tracing.run_span_context(run_id, run_trace_parent)))


def _ended(span: Span | None, attribute: str, outcome: str, error_code: str | None) -> None:
    """Name how a companion's span ended, with an error status for ``error_code``."""
    if span is None:
        return
    span.set_attribute(attribute, outcome)
    if error_code is not None:
        span.set_attribute("error.type", error_code)
        span.set_status(Status(StatusCode.ERROR, error_code))
