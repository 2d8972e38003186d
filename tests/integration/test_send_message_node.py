"""The ``send_message`` node end to end: the real worker runs ``start -> send_message -> finish``,
the step's checkpoint writes one notification to the outbox, and the worker's notifier delivers it
to a real local SMTP server with the notification's id as the Message-ID."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentflow.core.records import RunRecord
from agentflow.core.step_context import StepContext
from agentflow.engine import Engine
from agentflow.integrations.smtp_sink import SmtpSink
from agentflow.nodes.send_message import notification_id
from agentflow.runtime.worker import Worker
from tests.conftest import make_settings


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[SmtpSink]:
    sink = SmtpSink(jsonl_path=tmp_path / "mail.jsonl")
    sink.start()
    yield sink
    sink.stop()


@pytest.fixture
async def engine(database_url: str, sink: SmtpSink) -> AsyncIterator[Engine]:
    """The engine (and so the ``worker`` fixture's worker and its notifier) sending mail to the sink."""
    settings = make_settings(database_url, smtp_url=sink.url, smtp_from="agentflow@example.com")
    eng = await Engine.connect(settings, migrate_schema=False)
    yield eng
    await eng.close()


FLOW: dict[str, Any] = {
    "name": "tell-owner",
    "kind": "structured",
    "nodes": [
        {"id": "start", "type": "mapping", "output": {"who": "{{ payload.email }}", "co": "{{ payload.company }}"}},
        {"id": "tell", "type": "send_message", "channel": "email", "to": "{{ input.who }}",
         "subject": "Renewal: {{ input.co }}", "body": "{{ input.co }} renews on Friday.",
         "account_id": "{{ payload.account }}", "metadata": {"source": "test"}},
        {"id": "done", "type": "finish", "output": "{{ input }}"},
    ],
}  # fmt: skip


async def finished(engine: Engine, payload: Any) -> RunRecord:
    await engine.publish_workflow(FLOW)
    run = await engine.start_run(FLOW["name"], payload)
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "completed", (done.status, done.status_reason, done.error)
    return done


async def test_the_message_is_written_once_with_the_step_and_delivered_over_smtp(
    engine: Engine, worker: Worker, sink: SmtpSink
) -> None:
    payload = {"email": "dana@example.com", "company": "Acme", "account": "acc-7"}
    done = await finished(engine, payload)
    [step] = [s for s in await engine.list_steps(done.id) if s.node_id == "tell"]
    assert step.kind == "send_message" and step.status == "completed"
    ctx = StepContext(engine_workspace(done), done.id, done.workflow_id, step.seq, 1, 0, {})
    note_id = notification_id(ctx)
    assert note_id == uuid.uuid5(done.id, f"send_message:{done.id}:{step.seq}")
    expected = {"notification_id": str(note_id), "channel": "email", "recipient": "dana@example.com"}
    assert step.output == expected and done.output == expected
    rows = await engine.db.pool.fetch("SELECT * FROM notifications WHERE run_id = $1", done.id)
    assert len(rows) == 1, "exactly one notification for the step"
    row = rows[0]
    assert row["id"] == note_id and row["origin_key"] == f"{done.id}:{step.seq}:n1"
    assert (row["channel"], row["recipient"], row["subject"], row["body"], row["kind"], row["account_id"]) == (
        "email", "dana@example.com", "Renewal: Acme", "Acme renews on Friday.", "message", "acc-7",
    )  # fmt: skip
    assert row["metadata"]["source"] == "test" and row["metadata"]["node"] == "tell"
    for _ in range(100):  # the worker's notifier delivers it after the checkpoint
        status = await engine.db.pool.fetchval("SELECT status FROM notifications WHERE id = $1", note_id)
        if status == "sent" and sink.messages:
            break
        await asyncio.sleep(0.1)
    assert status == "sent"
    [mail] = sink.messages
    assert mail.rcpt_tos == ["dana@example.com"]
    assert mail.subject == "Renewal: Acme" and mail.body.strip() == "Acme renews on Friday."
    assert mail.message_id == f"<{note_id}@example.com>", "the notification id is the idempotency key"
    assert mail.headers["X-Agentflow-Run"] == str(done.id)


async def test_a_recipient_that_renders_to_no_address_fails_the_step_and_sends_nothing(
    engine: Engine, worker: Worker, sink: SmtpSink
) -> None:
    await engine.publish_workflow(FLOW)
    run = await engine.start_run(FLOW["name"], {"email": "nobody", "company": "Acme"})
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "failed" and done.error is not None
    assert done.error["code"] == "message_recipient_invalid" and "'tell'" in done.error["message"]
    assert await engine.db.pool.fetchval("SELECT count(*) FROM notifications WHERE run_id = $1", run.id) == 0
    assert sink.messages == []


def engine_workspace(run: RunRecord) -> uuid.UUID:
    return run.workspace_id


async def test_without_an_account_id_the_message_is_about_the_runs_account(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow({
        "name": "order-note", "kind": "structured", "trigger": {"topics": ["order.placed"]},
        "nodes": [{"id": "tell", "type": "send_message", "channel": "in_app", "to": "dana",
                   "body": "Order {{ payload.n }} for {{ run.account_id }}"}],
    })  # fmt: skip
    await engine.events.publish(
        [{"topic": "order.placed", "message_id": "o-1", "account_id": "acc-9", "data": {"n": 7}}]
    )
    for _ in range(200):
        row = await engine.db.pool.fetchrow(
            "SELECT account_id, body FROM notifications WHERE channel = 'in_app'"
        )
        if row is not None:
            break
        await asyncio.sleep(0.05)
    assert row is not None and (row["account_id"], row["body"]) == ("acc-9", "Order 7 for acc-9")
