"""The worker's companions trace their own work (issue 16): a span per batch the dispatcher
decides (linked to the spans its events were published in, with what was decided), per pass
of the scheduler that fires schedules (the runs it starts are its children) and per retention
pass (what it deleted), per delivery attempt of a notification (under its run's span, and
named in the outgoing webhook's ``traceparent``), and per gate verdict (in its event's trace,
the run it starts its child). Reading a reply: ``tests/integration/test_request_replies.py``."""

from __future__ import annotations

from uuid import UUID, uuid4

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agentflow.engine import DEFAULT_WORKSPACE, Engine
from agentflow.runtime import tracing
from agentflow.runtime.gatekeeper import Gatekeeper
from agentflow.runtime.notifier import Notifier
from agentflow.runtime.scheduler import Scheduler
from tests.integration.test_dispatch import dispatch_all
from tests.integration.test_gate import FlakyGate, RuleGate, agent
from tests.integration.test_notifier import notifier, receiver  # noqa: F401  (fixtures)
from tests.integration.test_schedules import outage, scheduled
from tests.support.target_server import Reply, TargetServer


def named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name == name]


def traceparent_of(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


async def test_a_dispatched_batch_is_a_span_linked_to_its_events_with_what_was_decided(
    engine: Engine, spans: InMemorySpanExporter
) -> None:
    await engine.publish_workflow(
        {
            "name": "on-gold-order",
            "kind": "structured",
            "trigger": {
                "topics": ["order.*"],
                "conditions": [{"path": "data.tier", "op": "equals", "value": "gold"}],
            },
            "nodes": [{"id": "done", "type": "finish", "output": "ok"}],
        }
    )
    application = TracerProvider().get_tracer("the-application")
    with application.start_as_current_span("checkout") as checkout:
        await engine.events.publish(
            [{"topic": "order.placed", "message_id": "o-1", "data": {"tier": "gold"}}]
        )
    await engine.events.publish(
        [
            {"topic": "order.placed", "message_id": "o-2", "data": {"tier": "gold"}},
            {"topic": "order.placed", "message_id": "o-3", "data": {"tier": "tin"}},
        ]
    )
    assert await dispatch_all(engine) == 3

    (batch,) = named(spans, "dispatch events")
    assert batch.kind == SpanKind.CONSUMER
    attributes = dict(batch.attributes or {})
    assert attributes["messaging.system"] == "agentflow"
    assert attributes["messaging.batch.message_count"] == 3
    assert (attributes["agentflow.dispatch.started"], attributes["agentflow.dispatch.not_matched"]) == (2, 1)
    # Only the traced event links its publisher's span; the batch is a trace of its own.
    assert [link.context.span_id for link in batch.links] == [checkout.get_span_context().span_id]
    assert batch.parent is None
    assert batch.context is not None and batch.context.trace_id != checkout.get_span_context().trace_id


async def test_a_failing_batch_span_is_an_error_and_the_batch_is_retried(
    engine: Engine, spans: InMemorySpanExporter
) -> None:
    await engine.publish_workflow(
        {
            "name": "on-order",
            "kind": "structured",
            "trigger": {"topics": ["order.*"]},
            "nodes": [{"id": "done", "type": "finish", "output": "ok"}],
        }
    )
    await engine.events.publish([{"topic": "order.placed", "message_id": "o-1", "data": {}}])
    await engine.db.pool.execute(
        "ALTER TABLE dispatch_decisions ADD CONSTRAINT sabotage CHECK (false) NOT VALID"
    )
    with pytest.raises(Exception, match="sabotage"):
        await dispatch_all(engine)
    failed = named(spans, "dispatch events")
    assert failed and failed[0].status.status_code == StatusCode.ERROR
    await engine.db.pool.execute("ALTER TABLE dispatch_decisions DROP CONSTRAINT sabotage")
    assert await dispatch_all(engine) == 1
    assert dict(named(spans, "dispatch events")[-1].attributes or {})["agentflow.dispatch.started"] == 1


async def test_a_scheduler_pass_that_fires_is_a_span_and_its_runs_are_children(
    engine: Engine, spans: InMemorySpanExporter
) -> None:
    await engine.publish_workflow(scheduled("nightly", catch_up="all"))
    scheduler = Scheduler(engine.db)
    assert await scheduler.tick() == 0  # plans the new schedule's first fire
    assert await scheduler.tick() == 0
    assert len(named(spans, "fire schedules")) == 1, "a pass with no schedule due has no span"
    await outage(engine, "nightly", 2)
    assert await scheduler.tick() == 2

    planned, fired = named(spans, "fire schedules")
    assert dict(planned.attributes or {})["agentflow.schedules.runs_started"] == 0
    attributes = dict(fired.attributes or {})
    assert (attributes["agentflow.schedules.due"], attributes["agentflow.schedules.runs_started"]) == (1, 2)
    runs = await engine.list_runs(workflow="nightly")
    assert len(runs) == 2
    assert {run.trace_parent for run in runs} == {traceparent_of(fired)}
    assert fired.context is not None
    assert {tracing.run_ids(run)[0] for run in runs} == {fired.context.trace_id}


async def test_a_retention_pass_is_a_span_naming_what_it_deleted(
    engine: Engine, spans: InMemorySpanExporter
) -> None:
    await engine.events.publish([{"topic": "old.news", "message_id": f"n-{i}", "data": {}} for i in range(3)])
    await engine.events.publish([{"topic": "new.news", "message_id": "n-new", "data": {}}])
    await engine.db.pool.execute(
        "UPDATE events SET received_at = now() - interval '3 hours' WHERE topic = 'old.news'"
    )
    deleted = await Scheduler(engine.db, retention=3600).apply_retention()
    assert deleted["events"] == 3

    (pass_,) = named(spans, "prune history")
    attributes = dict(pass_.attributes or {})
    assert attributes["agentflow.retention.events"] == 3
    assert {k: v for k, v in attributes.items() if k.startswith("agentflow.retention.")} == {
        f"agentflow.retention.{kind}": count for kind, count in deleted.items()
    }


async def notify(engine: Engine, url: str, run_id: UUID | None) -> UUID:
    note_id = uuid4()
    await engine.db.pool.execute(
        "INSERT INTO notifications (workspace_id, id, run_id, channel, recipient, subject, body)"
        " VALUES ($1, $2, $3, 'webhook', $4, 'Renewal', 'Acme renews on Friday')",
        DEFAULT_WORKSPACE, note_id, run_id, url,
    )  # fmt: skip
    return note_id


async def test_a_delivery_is_a_span_under_its_runs_span_named_in_the_webhooks_traceparent(
    engine: Engine,
    notifier: Notifier,  # noqa: F811
    receiver: TargetServer,  # noqa: F811
    spans: InMemorySpanExporter,
) -> None:
    await engine.publish_workflow(
        {"name": "notes", "kind": "structured", "nodes": [{"id": "done", "type": "finish", "output": "ok"}]}
    )
    run = await engine.start_run("notes", {})
    note = await notify(engine, f"{receiver.url}/hook", run.id)
    assert await notifier.deliver_due() == 1

    (sent,) = named(spans, "send webhook")
    assert sent.kind == SpanKind.CLIENT
    trace_id, run_span_id = tracing.run_ids(await engine.get_run(run.id))
    assert sent.context is not None and sent.context.trace_id == trace_id
    assert sent.parent is not None and sent.parent.span_id == run_span_id
    attributes = dict(sent.attributes or {})
    assert attributes["agentflow.notification.id"] == str(note)
    assert attributes["agentflow.run.id"] == str(run.id)
    assert attributes["agentflow.notification.outcome"] == "sent"
    (call,) = receiver.received
    assert call.headers["traceparent"] == traceparent_of(sent)


async def test_a_failed_delivery_span_says_it_will_be_retried_and_why(
    engine: Engine,
    notifier: Notifier,  # noqa: F811
    receiver: TargetServer,  # noqa: F811
    spans: InMemorySpanExporter,
) -> None:
    receiver.route("/down", Reply(503, body=b"busy"))
    await notify(engine, f"{receiver.url}/down", None)
    assert await notifier.deliver_due() == 1

    (attempt,) = named(spans, "send webhook")
    assert attempt.parent is None, "a notification of no run starts a trace of its own"
    attributes = dict(attempt.attributes or {})
    assert attributes["agentflow.notification.outcome"] == "retry"
    assert attributes["error.type"] and attempt.status.status_code == StatusCode.ERROR


async def test_a_gate_verdict_is_a_span_in_its_events_trace_and_the_run_it_starts_its_child(
    engine: Engine, spans: InMemorySpanExporter, database_url: str
) -> None:
    await engine.publish_workflow(agent("gated", type="account", sources=[{"type": "signal"}], gate={}))
    application = TracerProvider().get_tracer("the-application")
    with application.start_as_current_span("churn detector") as detector:
        await engine.events.publish(
            [
                {
                    "topic": "signal.churn",
                    "message_id": "hi",
                    "data": {"account_id": "a1", "priority": "high"},
                },
                {
                    "topic": "signal.churn",
                    "message_id": "lo",
                    "data": {"account_id": "a2", "priority": "low"},
                },
            ]
        )
    await dispatch_all(engine)
    keeper = Gatekeeper(engine.db, RuleGate(database_url), owner="test", batch_size=1)
    assert [await keeper.work_once() for _ in range(3)] == [1, 1, 0]

    by_event = {dict(s.attributes or {})["agentflow.event.message_id"]: s for s in named(spans, "gate gated")}
    started, declined = by_event["hi"], by_event["lo"]
    detected = detector.get_span_context()
    for span in (started, declined):
        assert span.parent is not None and span.parent.span_id == detected.span_id, "in the event's trace"
        assert span.context is not None and span.context.trace_id == detected.trace_id
    assert dict(started.attributes or {})["agentflow.gate.outcome"] == "started"
    assert dict(declined.attributes or {})["agentflow.gate.outcome"] == "declined"
    (run,) = await engine.list_runs(workflow="gated")
    assert run.trace_parent == traceparent_of(started), "the run continues the gate's span"


async def test_a_gate_that_fails_is_an_error_span_asked_again_later(
    engine: Engine, spans: InMemorySpanExporter
) -> None:
    await engine.publish_workflow(agent("gated", type="account", sources=[{"type": "signal"}], gate={}))
    await engine.events.publish([{"topic": "signal.churn", "message_id": "x", "data": {"account_id": "a1"}}])
    await dispatch_all(engine)
    assert await Gatekeeper(engine.db, FlakyGate(1), owner="test").work_once() == 1
    (span,) = named(spans, "gate gated")
    attributes = dict(span.attributes or {})
    assert (attributes["agentflow.gate.outcome"], attributes["error.type"]) == ("retry", "ConnectionError")
    assert span.status.status_code == StatusCode.ERROR
    assert span.parent is None, "an event published outside any trace starts the gate's own"
