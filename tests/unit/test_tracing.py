"""The tracing module without a database: settings, traceparent parsing, model-call spans."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agentflow.core.chat import Message, ModelRequest, ModelResponse, Usage
from agentflow.core.records import RunRecord
from agentflow.llm.base import ModelError
from agentflow.runtime import tracing


def a_run(trace_parent: str | None = None) -> RunRecord:
    now = datetime.now(UTC)
    return RunRecord(
        workspace_id=uuid.uuid4(), id=uuid.uuid4(), workflow_id=uuid.uuid4(), workflow_version=1,
        status="in_progress", status_reason=None, enrollment_key=None, input={}, state={}, output=None,
        error=None, step_seq=0, attempt=0, rescues=0, due_at=None, lease_owner=None, lease_expires_at=None,
        fencing_token=1, cancel_requested=False, parent_run_id=None, input_tokens=0, output_tokens=0,
        cached_input_tokens=0, usd_cost=0, created_at=now, started_at=now, updated_at=now,
        completed_at=None, canceled_at=None, trace_parent=trace_parent,
    )  # type: ignore[arg-type]  # fmt: skip


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # an unknown version
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b71692033-01",  # a short span id
        "00-0af7651916cd43dd8448eb211c80319z-b7ad6b7169203331-01",  # not hex
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # an all-zero trace id
        "00-0af7651916cd43dd8448eb211c80319c",
    ],
)
def test_a_run_without_a_readable_traceparent_has_a_trace_of_its_own(header: str | None) -> None:
    run = a_run(header)
    assert tracing.run_ids(run)[0] == run.id.int
    assert tracing.run_traceparent(run) == f"00-{run.id.int:032x}-{tracing.run_ids(run)[1]:016x}-01"


def test_a_runs_span_id_is_the_same_in_every_process_and_differs_between_runs() -> None:
    run, other = a_run(), a_run()
    assert tracing.run_ids(run) == tracing.run_ids(run)
    assert tracing.run_ids(run)[1] != tracing.run_ids(other)[1]
    unsampled = a_run("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
    assert tracing.run_traceparent(unsampled).endswith("-00")  # as the caller decided


def test_the_settings_choose_the_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/v1/traces")
    try:
        tracing.configure("off")
        assert not tracing.enabled()
        tracing.configure(" OTLP ")
        assert tracing.enabled()
        processor = tracing._provider._active_span_processor._span_processors[0]  # type: ignore[union-attr]
        assert isinstance(processor._batch_processor._exporter, OTLPSpanExporter)  # type: ignore[attr-defined]
        tracing.configure("console")
        assert tracing.enabled()
    finally:
        tracing.uninstall()
    assert not tracing.enabled()


async def test_a_model_call_span_records_the_request_and_the_answer(spans: InMemorySpanExporter) -> None:
    request = ModelRequest(
        "gpt-4o-mini",
        (Message("user", "hi"),),
        max_output_tokens=100,
        temperature=0.2,
        top_p=0.9,
        stop=("END",),
    )
    answer = ModelResponse(
        Message("assistant", "hello"), Usage(12, 3, 8), "gpt-4o-mini-2024", "openai", finish_reason="stop"
    )
    with tracing.model_span("openai", request) as span:
        tracing.record_answer(span, answer)
    with tracing.model_span("gemini", ModelRequest("gemini-2.0-flash", (), max_output_tokens=None)) as span:
        tracing.record_answer(span, None, ModelError("model_rate_limited", "slow down", retryable=True))
    ok, failed = spans.get_finished_spans()
    assert ok.name == "chat gpt-4o-mini" and ok.attributes is not None
    assert dict(ok.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.request.max_tokens": 100,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.top_p": 0.9,
        "gen_ai.request.stop_sequences": ("END",),
        "gen_ai.response.model": "gpt-4o-mini-2024",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.usage.cache_read.input_tokens": 8,
        "gen_ai.response.finish_reasons": ("stop",),
    }
    assert failed.attributes is not None and failed.attributes["gen_ai.provider.name"] == "gcp.gemini"
    assert failed.attributes["error.type"] == "model_rate_limited"
    assert failed.status.status_code is StatusCode.ERROR


def test_with_tracing_off_the_helpers_do_nothing() -> None:
    assert not tracing.enabled()
    run = a_run()
    with tracing.model_span("openai", ModelRequest("m", ())) as span:
        tracing.record_answer(span, None)
    tracing.name_step(None, "tool", "x", None)
    tracing.end_run(run, "completed")
    assert span is None
