"""Slack and webhook notifications through the guarded client, against a real local HTTP server."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from agentflow.core.errors import StepFailure
from agentflow.integrations import BlockedDestination, guarded_client, post_slack, post_webhook
from tests.support.target_server import Reply, TargetServer

HOOK = "/services/T000/B000/s3cr3tT0k3n"


@pytest.fixture
def slack() -> Iterator[TargetServer]:
    with TargetServer("127.0.0.1") as server:
        yield server


async def test_post_slack_sends_text_and_blocks(slack: TargetServer) -> None:
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "*Deployed* ✓"}}]
    async with guarded_client(allow=["127.0.0.1"]) as client:
        await post_slack(client, f"{slack.url}{HOOK}", "Deployed ✓", idempotency_key="notif-1", blocks=blocks)
    (call,) = slack.received
    assert (call.method, call.path) == ("POST", HOOK)
    assert json.loads(call.body) == {"text": "Deployed ✓", "blocks": blocks}
    assert call.headers["Idempotency-Key"] == "notif-1"
    assert call.headers["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    ("status", "answer", "retryable"),
    [
        (500, "rollup_error", True),
        (503, "service unavailable", True),
        (429, "rate_limited", True),
        (404, "no_service", False),
        (403, "invalid_token", False),
        (400, "invalid_payload", False),
        (410, "channel_is_archived", False),
    ],
)
async def test_slack_errors_carry_the_answer_and_the_retry_decision(
    slack: TargetServer, status: int, answer: str, retryable: bool
) -> None:
    slack.route(HOOK, Reply(status, body=answer.encode()))
    async with guarded_client(allow=["127.0.0.1"]) as client:
        with pytest.raises(StepFailure) as error:
            await post_slack(client, f"{slack.url}{HOOK}", "hi", idempotency_key="notif-2")
    failure = error.value
    assert failure.info.code == "slack_failed" and failure.retryable is retryable
    assert str(status) in failure.info.message and answer in failure.info.message
    assert "s3cr3tT0k3n" not in failure.info.message  # the webhook path is the credential
    assert failure.info.solution


async def test_slack_url_on_a_private_address_is_blocked_without_allow_list(slack: TargetServer) -> None:
    async with guarded_client() as client:
        with pytest.raises(BlockedDestination) as error:
            await post_slack(client, f"{slack.url}{HOOK}", "hi", idempotency_key="notif-3")
    assert error.value.info.code == "destination_blocked" and error.value.retryable is False
    assert slack.received == []
    # Control: the same call with the address allowed does arrive, so the test can fail.
    async with guarded_client(allow=["127.0.0.1"]) as client:
        await post_slack(client, f"{slack.url}{HOOK}", "hi", idempotency_key="notif-3")
    assert len(slack.received) == 1


async def test_webhook_redirect_is_a_failure_not_followed(slack: TargetServer) -> None:
    with TargetServer("127.0.0.1") as elsewhere:
        slack.route("/hook", Reply(302, headers={"Location": f"{elsewhere.url}/new"}, body=b""))
        async with guarded_client(allow=["127.0.0.1"]) as client:
            with pytest.raises(StepFailure) as error:
                await post_webhook(client, f"{slack.url}/hook", {"event": "done"}, "notif-4")
        assert elsewhere.received == []
    assert error.value.info.code == "webhook_failed" and error.value.retryable is False
    assert "redirected" in error.value.info.message


async def test_post_webhook_delivers_json_with_the_idempotency_key(slack: TargetServer) -> None:
    async with guarded_client(allow=["127.0.0.1"]) as client:
        await post_webhook(client, f"{slack.url}/hook?token=abc", {"run": "r1", "ok": True}, "notif-5")
    (call,) = slack.received
    assert call.path == "/hook?token=abc" and json.loads(call.body) == {"run": "r1", "ok": True}
    assert call.headers["Idempotency-Key"] == "notif-5"


@pytest.mark.parametrize(("status", "retryable"), [(503, True), (408, True), (400, False), (401, False)])
async def test_webhook_status_decides_retry(slack: TargetServer, status: int, retryable: bool) -> None:
    slack.route("/hook", Reply(status, body=b"nope"))
    async with guarded_client(allow=["127.0.0.1"]) as client:
        with pytest.raises(StepFailure) as error:
            await post_webhook(client, f"{slack.url}/hook?token=secret", {"a": 1}, "notif-6")
    assert error.value.info.code == "webhook_failed" and error.value.retryable is retryable
    assert "secret" not in error.value.info.message


async def test_unreachable_webhook_is_retryable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with guarded_client(allow=["127.0.0.1"], timeout=5) as client:
        with pytest.raises(StepFailure) as error:
            await post_webhook(client, f"http://127.0.0.1:{port}/hook", {"a": 1}, "notif-7")
    assert error.value.info.code == "webhook_failed" and error.value.retryable is True
