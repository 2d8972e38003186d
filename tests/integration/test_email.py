"""EmailSender over real SMTP: the local SmtpSink receives, rejects, or is not there at all."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import aiosmtplib
import pytest

from agentflow.core.errors import ConfigError, StepFailure
from agentflow.integrations.email import EmailSender, SmtpServer
from agentflow.integrations.smtp_sink import SmtpSink

FROM = "Agentflow <agentflow@example.com>"


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[SmtpSink]:
    sink = SmtpSink(
        jsonl_path=tmp_path / "mail.jsonl",
        reject={
            "gone@example.com": "550 5.1.1 No such user here",
            "busy@example.com": "451 4.3.0 Try again later",
        },
    )
    host, port = sink.start()
    assert host == "127.0.0.1" and port > 0
    yield sink
    sink.stop()


async def test_message_arrives_with_subject_body_and_message_id(sink: SmtpSink, tmp_path: Path) -> None:
    sender = EmailSender(sink.url, FROM, timeout=5)
    await sender.send(
        ["ana@example.com", "Bo <bo@example.com>"],
        "Run finished ✓",
        "Hello Ana,\nthe run — ünïcode included — is done.",
        message_id="notification-42",
        headers={"X-Agentflow-Run": "run-1", "Reply-To": "ops@example.com"},
    )
    (message,) = sink.messages
    assert message.mail_from == "agentflow@example.com"
    assert message.rcpt_tos == ["ana@example.com", "bo@example.com"]
    assert message.subject == "Run finished ✓"
    assert message.body == "Hello Ana,\nthe run — ünïcode included — is done.\n"
    assert message.message_id == "<notification-42@example.com>"
    assert message.headers["X-Agentflow-Run"] == "run-1"
    assert message.headers["Reply-To"] == "ops@example.com"
    assert "utf-8" in message.headers["Content-Type"]
    (line,) = (tmp_path / "mail.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(line)["subject"] == "Run finished ✓"


async def test_redelivery_carries_the_same_message_id(sink: SmtpSink) -> None:
    sender = EmailSender(sink.url, "agentflow@example.com", timeout=5)
    for _ in range(2):
        await sender.send("ana@example.com", "Reminder", "Due soon", message_id="run:7/step:3")
    first, second = sink.messages
    assert first.message_id == second.message_id == "<run=3A7/step=3A3@example.com>"
    # Another id never collides with it.
    await sender.send("ana@example.com", "Reminder", "Due soon", message_id="run=3A7/step=3A3")
    assert sink.messages[2].message_id != first.message_id


async def test_permanent_rejection_is_not_retryable(sink: SmtpSink) -> None:
    sender = EmailSender(sink.url, FROM, timeout=5)
    with pytest.raises(StepFailure) as error:
        await sender.send("gone@example.com", "Hi", "body", message_id="m-1")
    assert error.value.info.code == "smtp_failed" and error.value.retryable is False
    assert "550" in error.value.info.message and "No such user here" in error.value.info.message
    assert sink.messages == []


async def test_temporary_rejection_is_retryable(sink: SmtpSink) -> None:
    sender = EmailSender(sink.url, FROM, timeout=5)
    with pytest.raises(StepFailure) as error:
        await sender.send("busy@example.com", "Hi", "body", message_id="m-2")
    assert error.value.info.code == "smtp_failed" and error.value.retryable is True
    assert "451" in error.value.info.message


async def test_partly_refused_is_not_retried_to_spare_the_delivered(sink: SmtpSink) -> None:
    sender = EmailSender(sink.url, FROM, timeout=5)
    with pytest.raises(StepFailure) as error:
        await sender.send(["ana@example.com", "busy@example.com"], "Hi", "body", message_id="m-3")
    assert error.value.retryable is False and "busy@example.com: 451" in error.value.info.message
    assert [m.rcpt_tos for m in sink.messages] == [["ana@example.com"]]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_unreachable_server_is_retryable() -> None:
    sender = EmailSender(f"smtp://127.0.0.1:{_closed_port()}", FROM, timeout=5)
    with pytest.raises(StepFailure) as error:
        await sender.send("ana@example.com", "Hi", "body", message_id="m-4")
    assert error.value.info.code == "smtp_failed" and error.value.retryable is True
    assert "127.0.0.1" in error.value.info.message


async def test_required_starttls_missing_is_not_retryable(sink: SmtpSink) -> None:
    sender = EmailSender(f"{sink.url}?starttls=1", FROM, timeout=5)
    with pytest.raises(StepFailure) as error:
        await sender.send("ana@example.com", "Hi", "body", message_id="m-5")
    assert error.value.retryable is False
    assert sink.messages == []


async def test_login_with_percent_encoded_credentials() -> None:
    with SmtpSink(credentials=("mailer", "p@ss:word")) as sink:
        sender = EmailSender(f"smtp://mailer:p%40ss%3Aword@{sink.host}:{sink.port}", FROM, timeout=5)
        await sender.send("ana@example.com", "Hi", "body", message_id="m-6")
        wrong = EmailSender(f"smtp://mailer:nope@{sink.host}:{sink.port}", FROM, timeout=5)
        with pytest.raises(StepFailure) as error:
            await wrong.send("ana@example.com", "Hi", "body", message_id="m-7")
        assert error.value.retryable is False and "535" in error.value.info.message
        assert len(sink.messages) == 1
    assert "nope" not in error.value.info.message


@pytest.mark.parametrize(
    ("to", "subject", "headers"),
    [
        ("ana@example.com", "Hi\r\nBcc: victim@example.com", None),
        ("ana@example.com", "Hi\nX-Injected: 1", None),
        ("ana@example.com\r\nBcc: victim@example.com", "Hi", None),
        ("ana@example.com", "Hi", {"X-Note": "ok\r\nBcc: victim@example.com"}),
        ("ana@example.com", "Hi", {"Bcc": "victim@example.com"}),
        ("ana@example.com", "Hi", {"From": "ceo@example.com"}),
        ("ana@example.com", "Hi", {"Bad Name": "x"}),
        ("ana@example.com, victim@example.com", "Hi", None),
        ("not-an-address", "Hi", None),
        ("ana@", "Hi", None),
        ("josé@example.com", "Hi", None),
    ],
)
async def test_injection_and_invalid_addresses_are_refused(
    sink: SmtpSink, to: str, subject: str, headers: dict[str, str] | None
) -> None:
    sender = EmailSender(sink.url, FROM, timeout=5)
    with pytest.raises(StepFailure) as error:
        await sender.send(to, subject, "body", message_id="m-8", headers=headers)
    assert error.value.info.code == "email_invalid" and error.value.retryable is False
    assert sink.messages == []


async def test_negative_control_naive_composition_is_injectable(sink: SmtpSink) -> None:
    """Without the checks a line break in the subject does add a header: the test above can fail."""
    subject = "Hi\r\nX-Injected: yes"
    raw = f"From: agentflow@example.com\r\nTo: ana@example.com\r\nSubject: {subject}\r\n\r\nbody\r\n"
    await aiosmtplib.send(
        raw,
        sender="agentflow@example.com",
        recipients=["ana@example.com"],
        hostname=sink.host,
        port=sink.port,
    )
    (message,) = sink.messages
    assert message.headers.get("X-Injected") == "yes"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("smtp://mail.example.com", ("mail.example.com", 25, None, None, False, False)),
        ("smtp://u:p@mail.example.com:2525", ("mail.example.com", 2525, "u", "p", False, False)),
        ("smtp://mail.example.com?starttls=1", ("mail.example.com", 587, None, None, False, True)),
        ("smtps://u%40x:p%2F@mail.example.com", ("mail.example.com", 465, "u@x", "p/", True, False)),
    ],
)
def test_smtp_urls(url: str, expected: tuple[object, ...]) -> None:
    server = SmtpServer.from_url(url)
    assert (
        server.host,
        server.port,
        server.username,
        server.password,
        server.implicit_tls,
        server.starttls,
    ) == expected


@pytest.mark.parametrize(
    "url",
    [
        "http://mail.example.com",
        "smtp://",
        "smtps://mail.example.com?starttls=1",
        "smtp://mail.example.com?starttls=maybe",
        "smtp://mail.example.com?tls=1",
        "smtp://u:secret@mail.example.com:99999",
    ],
)
def test_unusable_smtp_urls_fail_fast_without_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as error:
        EmailSender(url, FROM)
    assert error.value.code == "smtp_url_invalid" and "secret" not in error.value.info.message


def test_unusable_sender_fails_fast() -> None:
    with pytest.raises(ConfigError) as error:
        EmailSender("smtp://127.0.0.1:25", "nobody")
    assert error.value.code == "smtp_from_invalid"
