"""Events carry the trace they were published in (issue 16): an event published inside a span
(an application's own, or an API request's ``traceparent``) starts runs that continue that
trace, through the dispatcher, a debounce window and a webhook alike; an event published
outside any trace starts runs in their own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentflow.api.app import create_app
from agentflow.engine import Engine
from agentflow.runtime import tracing
from agentflow.runtime.worker import Worker
from tests.integration.test_debounce import close_all
from tests.integration.test_dispatch import dispatch_all
from tests.support.agents import first_run

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
HEADER = f"00-{TRACE}-00f067aa0ba902b7-01"


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


def listening(name: str, **trigger: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "structured",
        "trigger": {"topics": ["order.*"], **trigger},
        "nodes": [{"id": "done", "type": "finish", "output": "ok"}],
    }


async def test_a_run_started_by_an_event_continues_the_publishers_trace(
    engine: Engine, worker: Worker, spans: InMemorySpanExporter
) -> None:
    await engine.publish_workflow(listening("on-order"))
    caller = TracerProvider().get_tracer("the-application")
    with caller.start_as_current_span("checkout") as outer:
        (published,) = await engine.events.publish(
            [{"topic": "order.placed", "message_id": "o-1", "data": {}}]
        )
    context = outer.get_span_context()
    traceparent = f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    assert published.event.trace_parent == traceparent
    (untraced,) = await engine.events.publish([{"topic": "order.placed", "message_id": "o-2", "data": {}}])
    assert untraced.event.trace_parent is None
    listed: list[Any] = []
    for _ in range(300):  # the worker's dispatcher starts them
        listed = await engine.list_runs(workflow="on-order")
        if len(listed) == 2:
            break
        await asyncio.sleep(0.05)
    runs = {r.trigger["event"]["message_id"]: r for r in listed}
    assert runs["o-1"].trace_parent == traceparent and runs["o-2"].trace_parent is None
    done = await engine.wait_for_run(runs["o-1"].id, timeout=30)
    assert done.status == "completed"
    trace_id, _ = tracing.run_ids(done)
    assert trace_id == context.trace_id, "the run's spans sit in the publisher's trace"
    # The worker ends the run's span once its checkpoint's commit comes back: maybe just after
    # the run reads as completed here.
    run_spans: list[Any] = []
    for _ in range(500):
        run_spans = [s for s in spans.get_finished_spans() if s.name == "invoke_workflow on-order"
                     and s.attributes and s.attributes["agentflow.run.id"] == str(done.id)]  # fmt: skip
        if run_spans:
            break
        await asyncio.sleep(0.02)
    [run_span] = run_spans
    assert run_span.parent is not None and run_span.parent.span_id == context.span_id
    other, _ = tracing.run_ids(await engine.wait_for_run(runs["o-2"].id, timeout=30))
    assert other == runs["o-2"].id.int, "an event outside any trace: the run's own"


async def test_a_request_traceparent_reaches_runs_through_the_log_a_window_and_a_webhook(
    engine: Engine, api: httpx.AsyncClient
) -> None:
    await engine.publish_workflow(listening("batched", debounce={"seconds": 60}))
    await engine.publish_workflow({**listening("hooked"), "trigger": {"topics": []}})
    sent = await api.post(
        "/api/events",
        json={"topic": "order.placed", "message_id": "h-1", "data": {}},
        headers={"traceparent": HEADER},
    )
    assert sent.status_code in (200, 201, 202), sent.text
    await dispatch_all(engine)
    await close_all(engine)
    batched = await first_run(engine, "batched")
    assert batched.trace_parent is not None and batched.trace_parent.split("-")[1] == TRACE
    _, key = await engine.keys.create("api", "hooks", role="operator")
    fired = await api.post(
        "/api/private/trigger/hooked",
        json={"n": 1},
        headers={"traceparent": HEADER, "Authorization": f"Bearer {key}"},
    )
    assert fired.status_code in (200, 201, 202), fired.text
    hooked = await first_run(engine, "hooked")
    assert hooked.trace_parent is not None and hooked.trace_parent.split("-")[1] == TRACE
