"""The notifier delivers the outbox over each channel, and records why it could not:
a missing SMTP server or Slack URL fails a notification for good (naming what to set), an
answer of 5xx makes it due again later. Against real local servers, through the guarded client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any
from uuid import UUID, uuid4

import pytest

from agentflow.engine import DEFAULT_WORKSPACE, Engine
from agentflow.integrations import guarded_client
from agentflow.runtime.notifier import Notifier
from tests.support.target_server import Reply, TargetServer


@pytest.fixture
def receiver() -> Iterator[TargetServer]:
    with TargetServer("127.0.0.1") as server:
        yield server


@pytest.fixture
async def notifier(engine: Engine) -> AsyncIterator[Notifier]:
    async with guarded_client(allow=["127.0.0.1"]) as http:
        yield Notifier(engine.db, http, smtp_url=None, smtp_from="af@localhost", owner="test-notifier")


async def add(engine: Engine, channel: str, recipient: str, metadata: dict[str, Any] | None = None) -> UUID:
    note_id = uuid4()
    await engine.db.pool.execute(
        "INSERT INTO notifications (workspace_id, id, channel, recipient, subject, body, metadata)"
        " VALUES ($1, $2, $3, $4, 'Renewal', 'Acme renews on Friday', $5)",
        DEFAULT_WORKSPACE, note_id, channel, recipient, metadata or {},
    )  # fmt: skip
    return note_id


async def state(engine: Engine, note_id: UUID) -> dict[str, Any]:
    row = await engine.db.pool.fetchrow(
        "SELECT status, attempts, last_error, due_at > now() AS later FROM notifications WHERE id = $1",
        note_id,
    )
    assert row is not None
    return dict(row)


async def test_a_webhook_notification_is_posted_with_its_id_as_idempotency_key(
    engine: Engine, notifier: Notifier, receiver: TargetServer
) -> None:
    note = await add(engine, "webhook", f"{receiver.url}/hook")
    assert await notifier.deliver_due() == 1
    (call,) = receiver.received
    assert call.headers["Idempotency-Key"] == str(note)
    assert (await state(engine, note))["status"] == "sent"


async def test_a_5xx_answer_makes_the_notification_due_again_later(
    engine: Engine, notifier: Notifier, receiver: TargetServer
) -> None:
    receiver.route("/down", Reply(503, body=b"busy"))
    note = await add(engine, "webhook", f"{receiver.url}/down")
    assert await notifier.deliver_due() == 1
    after = await state(engine, note)
    assert (after["status"], after["attempts"], after["later"]) == ("pending", 1, True)
    assert after["last_error"]["code"]


async def test_email_without_an_smtp_server_fails_for_good_naming_the_setting(
    engine: Engine, notifier: Notifier
) -> None:
    note = await add(engine, "email", "dana@example.com")
    await notifier.deliver_due()
    after = await state(engine, note)
    assert after["status"] == "failed" and after["last_error"]["code"] == "smtp_not_configured"
    assert "AGENTFLOW_SMTP_URL" in after["last_error"]["message"]


async def test_email_with_an_unusable_smtp_url_fails_for_good_saying_why(engine: Engine) -> None:
    async with guarded_client() as http:
        broken = Notifier(
            engine.db, http, smtp_url="ftp://mail.example.com", smtp_from="af@localhost", owner="n"
        )
        note = await add(engine, "email", "dana@example.com")
        await broken.deliver_due()
    after = await state(engine, note)
    assert after["status"] == "failed" and after["last_error"]["code"] == "smtp_not_configured"
    assert "ftp" in after["last_error"]["message"]


async def test_slack_without_a_webhook_url_fails_for_good(engine: Engine, notifier: Notifier) -> None:
    note = await add(engine, "slack", "#renewals")
    await notifier.deliver_due()
    after = await state(engine, note)
    assert after["status"] == "failed" and after["last_error"]["code"] == "slack_not_configured"


async def test_an_unexpected_error_marks_the_notification_failed_and_due_again(engine: Engine) -> None:
    async with guarded_client(allow=["127.0.0.1"]) as http:
        pass  # closed: using it raises an error the notifier does not expect
    notifier = Notifier(engine.db, http, smtp_url=None, smtp_from="af@localhost", owner="test-notifier")
    note = await add(engine, "webhook", "http://127.0.0.1:9/hook")
    assert await notifier.deliver_due() == 1
    found = await state(engine, note)
    assert found["status"] == "pending" and found["later"], found
    assert found["last_error"]["code"] == "notification_exception"
