"""Traces of runs, steps and model calls (OpenTelemetry; off unless configured).

A run outlives the process that starts it and any worker that runs one of its steps, so its
trace cannot be one open span. Instead its identity is fixed when it starts and rebuilt from
the run's row by whichever worker holds it:

* the run span's trace id is the caller's (``runs.trace_parent``: the span that started it: an
  API request that carried a ``traceparent``, an application's own span around
  ``engine.start``, a parent run) or, for a run started outside any trace, the run's id;
* its span id is derived from the run's id, so every step span, in any process, names it as
  parent; the run span itself is emitted once, when the run ends, with ``created_at`` as its
  start.

Step spans (``execute_tool {tool}`` for tool calls, ``{kind} {node}`` for other steps) are
current while the step runs, so model calls (``chat {model}``, see ``model_timing``) and
outgoing HTTP requests (``traceparent``, see ``integrations.guarded_http``) nest under them.
Names and attributes follow the OpenTelemetry GenAI semantic conventions.

Nothing here costs a step anything while tracing is off (``enabled()`` is one global read).
"""

from __future__ import annotations

import contextvars
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any
from uuid import UUID

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from agentflow.core.chat import ModelRequest, ModelResponse
from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.errors import ConfigError
from agentflow.core.records import RunRecord

MODES = ("off", "otlp", "console")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
# The ids the next span takes (the run span: its ids are the run's, not random).
_CHOSEN: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "agentflow_span_ids", default=None
)


class _RunIds(RandomIdGenerator):
    """Random ids, except for the span being started as a run's own (``_CHOSEN``)."""

    def generate_span_id(self) -> int:
        chosen = _CHOSEN.get()
        return chosen[1] if chosen else super().generate_span_id()

    def generate_trace_id(self) -> int:
        chosen = _CHOSEN.get()
        return chosen[0] if chosen else super().generate_trace_id()


_provider: TracerProvider | None = None
_tracer: trace.Tracer | None = None


def install(
    exporter: SpanExporter | None = None, *, processor: SpanProcessor | None = None
) -> TracerProvider:
    """Start tracing in this process: spans go to ``processor``, or in batches to ``exporter``.

    The provider is agentflow's own (it does not replace an application's global one); its
    ``service.name`` is ``OTEL_SERVICE_NAME`` or ``agentflow``, and ``OTEL_TRACES_SAMPLER``
    chooses its sampler as usual.
    """
    global _provider, _tracer
    uninstall()
    service = os.environ.get("OTEL_SERVICE_NAME") or "agentflow"
    provider = TracerProvider(resource=Resource.create({"service.name": service}), id_generator=_RunIds())
    if processor is None:
        processor = BatchSpanProcessor(exporter or ConsoleSpanExporter())
    provider.add_span_processor(processor)
    _provider, _tracer = provider, provider.get_tracer("agentflow")
    return provider


def uninstall() -> None:
    """Stop tracing in this process, exporting what is still buffered."""
    global _provider, _tracer
    if _provider is not None:
        _provider.shutdown()
    _provider, _tracer = None, None


def configure(mode: str) -> None:
    """Set tracing up as ``AGENTFLOW_TRACES`` says: ``off``, ``otlp`` (OTLP over HTTP, to
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``, with their
    headers and timeout) or ``console`` (JSON on stdout, for a look while developing)."""
    mode = (mode or "off").strip().lower()
    if mode not in MODES:
        raise ConfigError(
            "traces_invalid",
            f"AGENTFLOW_TRACES is {mode!r}; use one of {', '.join(MODES)}",
            solution="Set AGENTFLOW_TRACES=otlp and OTEL_EXPORTER_OTLP_ENDPOINT to export traces.",
        )
    if mode == "otlp":
        # Imported when chosen: it brings protobuf and requests, which no other path needs.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        install(OTLPSpanExporter())
    elif mode == "console":
        install(ConsoleSpanExporter())


def enabled() -> bool:
    """Whether this process records spans."""
    return _tracer is not None


def run_ids(run: RunRecord) -> tuple[int, int]:
    """The run span's (trace id, span id), the same in every process."""
    found = run_span_context(run.id, run.trace_parent)
    return found.trace_id, found.span_id


def trace_id_of(run_id: UUID, trace_parent: str | None) -> int:
    """The trace id of a run's spans: its caller's, else the run's id."""
    caller = _parse(trace_parent)
    return caller.trace_id if caller else run_id.int or 1


def _run_span(run: RunRecord) -> SpanContext:
    """The run span as a remote parent; sampled as its caller was (always, without one)."""
    return run_span_context(run.id, run.trace_parent)


def run_span_context(run_id: UUID, trace_parent: str | None) -> SpanContext:
    """The span of the run ``run_id`` (started under ``trace_parent``), as a remote parent."""
    span_id = int.from_bytes(hashlib.blake2b(run_id.bytes, digest_size=8).digest(), "big") or 1
    caller = _parse(trace_parent)
    return SpanContext(
        trace_id_of(run_id, trace_parent), span_id, True, caller.trace_flags if caller else _SAMPLED
    )


def tracer() -> trace.Tracer | None:
    """This process's tracer, or None while tracing is off."""
    return _tracer


def parse_traceparent(traceparent: str | None) -> SpanContext | None:
    """A W3C ``traceparent`` as a remote span context; None when absent or malformed."""
    return _parse(traceparent)


def run_traceparent(run: RunRecord) -> str:
    """The run span as a W3C ``traceparent`` (what a child run records as its parent)."""
    found = _run_span(run)
    return f"00-{found.trace_id:032x}-{found.span_id:016x}-{int(found.trace_flags):02x}"


def current_traceparent() -> str | None:
    """The current span as a W3C ``traceparent``, or None outside any span."""
    found = trace.get_current_span().get_span_context()
    if not found.is_valid:
        return None
    return f"00-{found.trace_id:032x}-{found.span_id:016x}-{int(found.trace_flags):02x}"


@contextmanager
def step_span(run: RunRecord, seq: int, attempt: int, kind: str, node: str | None) -> Iterator[Span | None]:
    """A span for one attempt of one step, current while it runs (None while tracing is off)."""
    if _tracer is None:
        yield None
        return
    parent = trace.set_span_in_context(NonRecordingSpan(_run_span(run)))
    attributes: dict[str, Any] = {
        "agentflow.run.id": str(run.id),
        "agentflow.workspace.id": str(run.workspace_id),
        "agentflow.workflow.id": str(run.workflow_id),
        "agentflow.step.seq": seq,
        "agentflow.step.attempt": attempt,
        "agentflow.step.kind": kind,
    }
    if node is not None:
        attributes["agentflow.node.id"] = node
    with _tracer.start_as_current_span(
        f"{kind} {node}" if node else kind, context=parent, attributes=attributes, record_exception=False
    ) as span:
        yield span


def name_step(span: Span | None, kind: str, name: str | None, error_code: str | None, **tool: Any) -> None:
    """Name the step's span after what it turned out to be, and mark a failed attempt."""
    if span is None:
        return
    span.set_attribute("agentflow.step.kind", kind)
    if kind in ("tool", "agent.tool") and name:
        span.update_name(f"execute_tool {name}")
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        span.set_attribute("gen_ai.tool.name", name)
        if tool.get("call_id"):
            span.set_attribute("gen_ai.tool.call.id", str(tool["call_id"]))
    else:
        if kind.startswith("agent."):  # an agent run's step: what it was is known only now
            span.update_name(kind)
        if name:
            span.set_attribute("agentflow.step.name", name)
    if error_code is not None:
        span.set_attribute("error.type", error_code)
        span.set_status(Status(StatusCode.ERROR, error_code))


@contextmanager
def server_span(method: str, path: str, parent: Context | None) -> Iterator[Span | None]:
    """A span for one API request, current while it is handled, under the caller's span when
    its ``traceparent`` named one (None while tracing is off)."""
    if _tracer is None:
        yield None
        return
    attributes = {"http.request.method": method, "url.path": path}
    with _tracer.start_as_current_span(
        method, context=parent, kind=SpanKind.SERVER, attributes=attributes, record_exception=False
    ) as span:
        yield span


def end_request(span: Span | None, method: str, route: str | None, status: int | None) -> None:
    """Name a request's span after its route (``POST /api/runs/{run_id}/cancel``) and status."""
    if span is None:
        return
    if route:
        span.update_name(f"{method} {route}")
        span.set_attribute("http.route", route)
    if status is not None:
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            span.set_attribute("error.type", str(status))
            span.set_status(Status(StatusCode.ERROR))


# Our adapters' names as the GenAI conventions spell the providers (``gen_ai.provider.name``).
_PROVIDERS = {"gemini": "gcp.gemini", "scripted": "agentflow.scripted"}


@contextmanager
def model_span(provider: str, request: ModelRequest) -> Iterator[Span | None]:
    """A ``chat {model}`` span around one model call (None while tracing is off)."""
    if _tracer is None:
        yield None
        return
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": _PROVIDERS.get(provider, provider),
        "gen_ai.request.model": request.model,
    }
    for key, value in (
        ("gen_ai.request.max_tokens", request.max_output_tokens),
        ("gen_ai.request.temperature", request.temperature),
        ("gen_ai.request.top_p", request.top_p),
    ):
        if value is not None:
            attributes[key] = value
    if request.stop:
        attributes["gen_ai.request.stop_sequences"] = list(request.stop)
    with _tracer.start_as_current_span(
        f"chat {request.model}", kind=SpanKind.CLIENT, attributes=attributes, record_exception=False
    ) as span:
        yield span


def record_answer(span: Span | None, answer: Any, error: BaseException | None = None) -> None:
    """Put a model's answer (tokens, model, finish reason) or its failure on its span."""
    if span is None:
        return
    if isinstance(answer, ModelResponse):
        usage = answer.usage
        span.set_attribute("gen_ai.response.model", answer.model)
        span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        if usage.cached_input_tokens:
            span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cached_input_tokens)
        if answer.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [answer.finish_reason])
    if error is not None:
        code = getattr(error, "code", None) or type(error).__name__
        span.set_attribute("error.type", str(code))
        span.set_status(Status(StatusCode.ERROR, str(error)[:200]))


def with_trace_parent(run: RunRecord, children: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The child runs a step starts, each recording ``run``'s span as the one that started it."""
    parent = run_traceparent(run)
    return [{**child, "trace_parent": parent} for child in children]


def end_run(
    run: RunRecord,
    status: str,
    *,
    workflow: AgentConfig | StructuredConfig | None = None,
    reason: str | None = None,
    error: dict[str, Any] | None = None,
) -> None:
    """Emit the run's own span, from its creation to now (once, when the run ends)."""
    if _tracer is None:
        return
    agent, name = isinstance(workflow, AgentConfig), workflow.name if workflow else None
    error_code = (error or {}).get("code")
    caller = _parse(run.trace_parent)
    context = trace.set_span_in_context(NonRecordingSpan(caller)) if caller else Context()
    operation = "invoke_agent" if agent else "invoke_workflow"
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "agentflow.run.id": str(run.id),
        "agentflow.workspace.id": str(run.workspace_id),
        "agentflow.workflow.id": str(run.workflow_id),
        "agentflow.workflow.version": run.workflow_version,
        "agentflow.run.status": status,
    }
    if name:
        attributes["gen_ai.agent.name" if agent else "gen_ai.workflow.name"] = name
    if reason:
        attributes["agentflow.run.status_reason"] = reason
    chosen = _CHOSEN.set(run_ids(run))
    try:
        span = _tracer.start_span(
            f"{operation} {name}" if name else operation,
            context=context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=_nanos(run.created_at),
        )
    finally:
        _CHOSEN.reset(chosen)
    if status == "failed":
        span.set_attribute("error.type", error_code or reason or "failed")
        span.set_status(Status(StatusCode.ERROR, error_code or reason))
    span.end()


def _parse(traceparent: str | None) -> SpanContext | None:
    """A W3C ``traceparent`` (version 00) as a remote span context; None when absent or bad."""
    if not traceparent:
        return None
    parts = traceparent.strip().split("-")
    if len(parts) != 4 or parts[0] != "00" or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    return SpanContext(trace_id, span_id, True, TraceFlags(flags & 1))


def _nanos(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)
