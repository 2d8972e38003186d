"""Traces (issue 16): a span per run, per step and per model call, one trace per run whichever
worker ran its steps, joined to the caller's trace, and carried into outgoing HTTP calls."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from uuid import UUID

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agentflow.api.app import create_app
from agentflow.core.errors import ConfigError
from agentflow.engine import Engine
from agentflow.runtime import tracing
from agentflow.runtime.log_context import JsonFormatter
from agentflow.runtime.worker import Worker
from tests.conftest import make_settings
from tests.support.agents import calls, replies, running_worker, until
from tests.support.http_server import WORKFLOWS, serve
from tests.support.scripted_http import ScriptedServer, json_reply


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


@pytest.fixture
async def engine(database_url: str, server: ScriptedServer) -> AsyncIterator[Engine]:
    eng = await Engine.connect(
        make_settings(database_url, http_allow=f"127.0.0.1:{server.port}"), migrate_schema=False
    )
    yield eng
    await eng.close()


def by_name(found: list[ReadableSpan] | tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in found}


async def ended(spans: InMemorySpanExporter, *names: str, timeout: float = 10.0) -> dict[str, ReadableSpan]:
    """The finished spans by name once each of ``names`` has ended: a worker ends a run's span
    after its checkpoint's commit comes back, so a reader can see the run ended first."""
    deadline = time.monotonic() + timeout
    while True:
        found = by_name(spans.get_finished_spans())
        if all(name in found for name in names) or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.02)


def flow(name: str, *nodes: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "nodes": list(nodes)}


async def test_a_run_started_inside_a_callers_span_is_one_trace_from_the_caller_to_the_http_call(
    engine: Engine, worker: Worker, server: ScriptedServer, spans: InMemorySpanExporter
) -> None:
    server.script("/orders", json_reply({"id": 7}))
    await engine.publish_workflow(
        flow(
            "order-sync",
            {"id": "fetch", "type": "http_request", "url": f"{server.url}/orders"},
            {"id": "done", "type": "finish", "output": {"id": "{{ input.body.id }}"}},
        )
    )
    caller = TracerProvider().get_tracer("the-application")  # the application's own tracing
    with caller.start_as_current_span("handle-order") as outer:
        run = await engine.start_run("order-sync", {})
    context = outer.get_span_context()
    assert (
        run.trace_parent
        == f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    )
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "completed", done.error

    found = await ended(spans, "invoke_workflow order-sync", "http_request fetch")
    run_span, fetch = found["invoke_workflow order-sync"], found["http_request fetch"]
    trace_id, run_span_id = tracing.run_ids(done)
    assert trace_id == context.trace_id  # the caller's trace
    assert run_span.context is not None and fetch.context is not None and fetch.parent is not None
    assert (run_span.context.trace_id, run_span.context.span_id) == (trace_id, run_span_id)
    assert run_span.parent is not None and run_span.parent.span_id == context.span_id
    assert (fetch.context.trace_id, fetch.parent.span_id) == (trace_id, run_span_id)
    assert run_span.attributes is not None and fetch.attributes is not None
    assert run_span.attributes["gen_ai.operation.name"] == "invoke_workflow"
    assert run_span.attributes["agentflow.run.status"] == "completed"
    assert run_span.start_time == int(done.created_at.timestamp() * 1e9)
    assert fetch.attributes["agentflow.run.id"] == str(run.id)
    assert (fetch.attributes["agentflow.step.seq"], fetch.attributes["agentflow.step.attempt"]) == (0, 1)
    # The outgoing request names the step's span as its parent, in the same trace.
    [sent] = server.requests("/orders")
    assert sent.header("traceparent") == f"00-{trace_id:032x}-{fetch.context.span_id:016x}-01"


async def test_a_run_started_outside_any_trace_has_its_own_and_a_failed_step_is_an_error(
    engine: Engine, worker: Worker, server: ScriptedServer, spans: InMemorySpanExporter
) -> None:
    server.script("/down", json_reply({"error": "down"}, status=500))
    await engine.publish_workflow(
        flow(
            "flaky",
            {"id": "call", "type": "http_request", "url": f"{server.url}/down", "retry": {"max_attempts": 1}},
        )
    )
    run = await engine.start_run("flaky", {})
    assert run.trace_parent is None
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "failed"
    found = await ended(spans, "invoke_workflow flaky", "http_request call")
    run_span, call = found["invoke_workflow flaky"], found["http_request call"]
    assert run_span.context is not None and run_span.context.trace_id == run.id.int  # the run's own trace
    assert run_span.parent is None
    assert run_span.status.status_code is StatusCode.ERROR and call.status.status_code is StatusCode.ERROR
    assert call.attributes is not None and call.attributes["error.type"] == done.error["code"]  # type: ignore[index]
    [sent] = server.requests("/down")
    assert str(sent.header("traceparent")).startswith(f"00-{run.id.int:032x}-")


async def test_an_agent_run_has_model_call_spans_under_its_decisions_and_tool_spans(
    engine: Engine, spans: InMemorySpanExporter
) -> None:
    await engine.publish_workflow(
        {"name": "helper", "kind": "agent", "prompt": "Help.", "actions": {"create_tasks": {"enabled": True}}}
    )
    model = replies(calls(("create_task", {"title": "Call Acme", "assignee": "dana@acme.example"})))
    async with running_worker(engine, model=model):
        run = await engine.start_run("helper", {})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    finished = spans.get_finished_spans()
    chats = [s for s in finished if s.name.startswith("chat ")]
    decisions = [s for s in finished if s.name == "agent.decide"]
    tools = [s for s in finished if s.name == "execute_tool create_task"]
    assert len(chats) == len(decisions) == 2 and len(tools) == 1  # decide, create_task, decide (complete)
    for chat in chats:
        assert chat.kind is SpanKind.CLIENT and chat.attributes is not None and chat.parent is not None
        assert chat.parent.span_id in {d.context.span_id for d in decisions if d.context}
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "agentflow.scripted"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0  # type: ignore[operator]
        assert "gen_ai.usage.output_tokens" in chat.attributes
    [tool] = tools
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.tool.name"] == "create_task"
    assert tool.attributes["gen_ai.tool.call.id"] == "c0"
    agent = by_name(finished)["invoke_agent helper"]
    assert agent.attributes is not None and agent.attributes["gen_ai.agent.name"] == "helper"
    # Every span of the run is in its trace (the worker's dispatcher and retention pass
    # trace their own work).
    of_run = [s for s in finished if s.name not in ("dispatch events", "prune history")]
    assert {s.context.trace_id for s in of_run if s.context} == {tracing.run_ids(done)[0]}


async def test_a_child_run_continues_its_parents_trace(
    engine: Engine, worker: Worker, spans: InMemorySpanExporter
) -> None:
    await engine.publish_workflow(flow("child", {"id": "end", "type": "finish", "output": {"ok": True}}))
    await engine.publish_workflow(
        flow(
            "parent",
            {"id": "call", "type": "run_workflow", "workflow": "child"},
            {"id": "end", "type": "finish"},
        )
    )
    run = await engine.start_run("parent", {})
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "completed", done.error
    [child] = [r for r in await engine.list_runs(workflow="child") if r.parent_run_id == run.id]
    assert child.trace_parent == tracing.run_traceparent(done)
    child_span = (await ended(spans, "invoke_workflow child"))["invoke_workflow child"]
    assert child_span.context is not None and child_span.parent is not None
    assert child_span.context.trace_id == run.id.int
    assert child_span.parent.span_id == tracing.run_ids(done)[1]


async def test_json_log_lines_of_a_step_name_its_trace_and_span(
    engine: Engine, worker: Worker, server: ScriptedServer, spans: InMemorySpanExporter
) -> None:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(JsonFormatter().format(record))

    handler = Keep(logging.INFO)
    logging.getLogger("agentflow.integrations").addHandler(handler)
    logger = logging.getLogger("agentflow.integrations")
    level, logger.level = logger.level, logging.INFO
    server.script("/ping", json_reply({}))
    try:
        await engine.publish_workflow(
            flow("pinger", {"id": "ping", "type": "http_request", "url": f"{server.url}/ping"})
        )
        run = await engine.start_run("pinger", {})
        await engine.wait_for_run(run.id, timeout=30)
        with tracing.step_span(run, 99, 1, "probe", "p") as span:  # a line logged inside a step
            logger.info("inside")
    finally:
        logging.getLogger("agentflow.integrations").removeHandler(handler)
        logger.level = level
    assert span is not None
    [line] = [json.loads(x) for x in lines if '"inside"' in x]
    assert line["trace_id"] == f"{run.id.int:032x}"
    assert line["span_id"] == f"{span.get_span_context().span_id:016x}"


async def test_with_tracing_off_nothing_is_recorded_and_runs_store_no_trace_parent(
    engine: Engine, worker: Worker
) -> None:
    assert not tracing.enabled()
    await engine.publish_workflow(flow("quiet", {"id": "end", "type": "finish"}))
    run = await engine.start_run("quiet", {})
    done = await engine.wait_for_run(run.id, timeout=30)
    assert (done.status, done.trace_parent) == ("completed", None)
    with tracing.step_span(done, 0, 1, "finish", "end") as span:
        assert span is None


def test_an_unknown_traces_setting_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigError) as refused:
        tracing.configure("jaeger")
    assert "otlp" in str(refused.value) and "jaeger" in str(refused.value)
    assert not tracing.enabled()


async def test_a_request_with_a_traceparent_starts_a_run_in_that_trace_and_a_bad_one_is_ignored(
    engine: Engine,
) -> None:
    await engine.publish_workflow(flow("nap", {"id": "nap", "type": "wait", "duration": "1h"}))
    caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:
        traced = await client.post(f"{WORKFLOWS}/nap/runs", json={}, headers={"traceparent": caller})
        garbled = await client.post(f"{WORKFLOWS}/nap/runs", json={}, headers={"traceparent": "00-nonsense"})
        plain = await client.post(f"{WORKFLOWS}/nap/runs", json={})
    assert (traced.status_code, garbled.status_code, plain.status_code) == (201, 201, 201), garbled.text
    assert traced.json()["trace_parent"] == caller
    assert traced.json()["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    assert garbled.json()["trace_parent"] is None  # tracing never refuses a request
    for run in (garbled.json(), plain.json()):
        assert run["trace_id"] == UUID(run["id"]).hex  # a trace of its own


async def test_a_run_canceled_while_it_waits_has_its_span_emitted_by_the_canceller(
    engine: Engine, worker: Worker, spans: InMemorySpanExporter
) -> None:
    await engine.publish_workflow(flow("sleepy", {"id": "nap", "type": "wait", "duration": "1h"}))
    run = await engine.start_run("sleepy", {})
    await until(engine, run.id, lambda r: r.status == "waiting")
    await engine.cancel_run(run.id)
    ended = by_name(spans.get_finished_spans())["invoke_workflow sleepy"]
    assert ended.attributes is not None and ended.attributes["agentflow.run.status"] == "canceled"
    assert ended.context is not None and ended.context.span_id == tracing.run_ids(run)[1]


async def test_with_tracing_on_a_request_is_a_server_span_and_its_runs_sit_under_it(
    engine: Engine, spans: InMemorySpanExporter
) -> None:
    await engine.publish_workflow(flow("nap", {"id": "nap", "type": "wait", "duration": "1h"}))
    caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:
        started = await client.post(f"{WORKFLOWS}/nap/runs", json={}, headers={"traceparent": caller})
        missing = await client.get(f"{WORKFLOWS}/nowhere/runs")
        await client.get("/healthz")
    assert started.status_code == 201, started.text
    found = by_name(spans.get_finished_spans())
    assert not [name for name in found if "healthz" in name], list(found)  # health checks are not traced
    request = found[f"POST {WORKFLOWS}/{{workflow_id}}/runs"]
    assert request.kind is SpanKind.SERVER and request.context is not None and request.parent is not None
    assert (request.context.trace_id, request.parent.span_id) == (
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
    )
    assert request.attributes is not None and request.attributes["http.response.status_code"] == 201
    # The run records the request's span: its spans will sit under the request.
    assert (
        started.json()["trace_parent"]
        == f"00-{request.context.trace_id:032x}-{request.context.span_id:016x}-01"
    )
    lost = found[f"GET {WORKFLOWS}/{{workflow_id}}/runs"]
    assert (
        lost.attributes is not None
        and lost.attributes["http.response.status_code"] == missing.status_code == 404
    )
    assert lost.parent is None  # no traceparent: a trace of its own
