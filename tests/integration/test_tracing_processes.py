"""Traces across processes (issue 16): a run whose steps two worker processes ran, one after the
other, is one trace, exported by both over OTLP/HTTP to a collector-shaped server."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider

from agentflow.engine import Engine
from agentflow.runtime import tracing
from tests.support.processes import WorkerProcess, worker_env
from tests.support.scripted_http import ScriptedServer, json_reply
from tests.support.target_server import Reply


def received(server: ScriptedServer) -> list[tuple[str, str, int, int, int]]:
    """Every span the server received: (worker, name, trace id, span id, parent span id)."""
    found = []
    for request in server.requests("/v1/traces"):
        export = ExportTraceServiceRequest.FromString(request.body)
        for resource in export.resource_spans:
            attributes = {a.key: a.value.string_value for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                for span in scope.spans:
                    found.append((
                        attributes.get("test.worker", ""), span.name, int.from_bytes(span.trace_id, "big"),
                        int.from_bytes(span.span_id, "big"), int.from_bytes(span.parent_span_id or b"\0", "big"),
                    ))  # fmt: skip
    return found


async def eventually(check: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


@pytest.mark.timeout(120)
async def test_a_run_resumed_by_another_worker_process_continues_its_trace(
    engine: Engine, tmp_path: Path
) -> None:
    with ScriptedServer() as server:
        server.script("/v1/traces", Reply(200, headers={"Content-Type": "application/x-protobuf"}, body=b""))
        server.script("/first", json_reply({}))
        server.script("/second", json_reply({}))
        await engine.publish_workflow({
            "name": "halves", "kind": "structured", "nodes": [
                {"id": "first", "type": "http_request", "url": f"{server.url}/first"},
                {"id": "pause", "type": "wait", "duration": "3s"},
                {"id": "second", "type": "http_request", "url": f"{server.url}/second"},
                {"id": "end", "type": "finish"},
            ],
        })  # fmt: skip

        def spawn(name: str) -> WorkerProcess:
            env = worker_env(
                engine.db.url,
                traces="otlp",
                lease_ttl=2,
                poll_interval=0.2,
                http_allow=f"127.0.0.1:{server.port}",
            )
            env.update({
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{server.url}/v1/traces",
                "OTEL_BSP_SCHEDULE_DELAY": "100",
                "OTEL_RESOURCE_ATTRIBUTES": f"test.worker={name}",
            })  # fmt: skip
            worker = WorkerProcess(f"trace-{name}", env, tmp_path, concurrency=2, imports=())
            worker.wait_ready()
            return worker

        first = await asyncio.to_thread(spawn, "a")
        try:
            with TracerProvider().get_tracer("the-application").start_as_current_span("sync") as outer:
                run = await engine.start_run("halves", {})
            await eventually(lambda: server.requests("/first"))
        finally:
            await asyncio.to_thread(first.stop, 10)  # graceful: it exports what it recorded
        assert not server.requests("/second")  # the pause outlasts the first worker
        second = await asyncio.to_thread(spawn, "b")
        try:
            done = await engine.wait_for_run(run.id, timeout=60)
            assert done.status == "completed", done.error
        finally:
            await asyncio.to_thread(second.stop, 10)
        spans = received(server)
        [sent] = server.requests("/second")

    caller = outer.get_span_context()
    trace_id, run_span = tracing.run_ids(done)
    assert trace_id == caller.trace_id
    # The workers' retention passes on start are traces of their own (companion spans).
    assert {s[0] for s in spans if s[1] == "prune history"} == {"a", "b"}
    spans = [s for s in spans if s[1] not in ("prune history", "dispatch events")]
    assert {s[2] for s in spans} == {trace_id}  # one trace, from both processes
    names = {(worker, name): (span, parent) for worker, name, _, span, parent in spans}
    assert names[("a", "http_request first")][1] == run_span
    assert names[("b", "http_request second")][1] == run_span
    assert names[("b", "invoke_workflow halves")] == (run_span, caller.span_id)
    second_span = names[("b", "http_request second")][0]
    assert sent.header("traceparent") == f"00-{trace_id:032x}-{second_span:016x}-01"
