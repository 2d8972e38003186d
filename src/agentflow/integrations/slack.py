"""Post notifications to Slack incoming webhooks and to generic JSON webhooks.

The caller passes the client, which must be the guarded one (``guarded_client()``): a
webhook URL is workspace-controlled, so it gets the same destination checks as any other.
A refused destination surfaces as the client's ``BlockedDestination`` (code
``destination_blocked``, not retryable).

Retry decisions: 429 and 5xx are temporary (retryable); any other non-2xx answer, a
redirect included, means the URL or payload is wrong and will stay wrong. A redirect is not
followed: following a POST's 301/302 turns it into a GET, whose 200 would look like a
delivery that never happened.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import httpx

from agentflow.core.errors import StepFailure
from agentflow.integrations.http_errors import origin_of

_SHOWN_BODY = 300  # characters of the server's answer kept in the error message

# Slack's documented webhook error bodies, and what a person should do about each.
_SLACK_HINTS = {
    "invalid_token": "The webhook URL is revoked or wrong: create a new incoming webhook in Slack.",
    "no_service": "The webhook is disabled or removed: create a new incoming webhook in Slack.",
    "no_team": "The Slack workspace no longer exists or the URL is wrong.",
    "team_disabled": "The Slack workspace is disabled.",
    "channel_not_found": "The webhook's channel is gone: create a webhook for an existing channel.",
    "channel_is_archived": "The webhook's channel is archived: unarchive it or use another channel.",
    "action_prohibited": "A Slack admin restricted posting to this channel.",
    "posting_to_general_channel_denied": "Only admins may post to this channel.",
    "invalid_payload": "The message is malformed: check the text and blocks.",
    "too_many_attachments": "The message has too many attachments.",
}


async def post_slack(
    client: httpx.AsyncClient,
    webhook_url: str,
    text: str,
    *,
    idempotency_key: str,
    blocks: list[dict[str, Any]] | None = None,
) -> None:
    """Post ``text`` (and optional Block Kit ``blocks``) to a Slack incoming webhook.

    Slack's webhooks do not deduplicate; the ``Idempotency-Key`` header is still sent, so a
    proxy or recording server in between can recognise a retry.

    Args:
        client: the guarded HTTP client.
        webhook_url: ``https://hooks.slack.com/services/...``.
        text: the message (also the notification fallback when ``blocks`` are given).
        idempotency_key: stable across attempts of the same notification.
        blocks: Slack Block Kit blocks.

    Raises:
        StepFailure: ``slack_failed``, retryable for 429, 5xx and connection errors, with
            Slack's answer (``invalid_token``, ``no_service``, ...) in the message;
            ``destination_blocked`` when the guarded client refuses the URL.
    """
    payload: dict[str, Any] = {"text": text}
    if blocks is not None:
        payload["blocks"] = blocks
    response = await _post(client, webhook_url, payload, idempotency_key, "slack_failed", "Slack")
    if response.is_success:
        return
    answer = response.text.strip()[:_SHOWN_BODY]
    retryable = _temporary(response.status_code)
    raise StepFailure(
        "slack_failed",
        f"Slack answered {response.status_code} {answer!r}",
        retryable=retryable,
        details={"status": response.status_code, "body": answer},
        solution=_SLACK_HINTS.get(answer)
        or ("Temporary: the step is retried." if retryable else "Check the webhook URL and the message."),
    )


async def post_webhook(
    client: httpx.AsyncClient,
    url: str,
    payload: Any,
    idempotency_key: str,
) -> None:
    """POST ``payload`` as JSON to a webhook, with an ``Idempotency-Key`` header.

    Args:
        client: the guarded HTTP client.
        url: the receiver.
        payload: JSON-serialisable data.
        idempotency_key: stable across attempts, so the receiver can drop repeats.

    Raises:
        StepFailure: ``webhook_failed``, retryable for 408, 425, 429, 5xx and connection
            errors; ``destination_blocked`` when the guarded client refuses the URL.
    """
    response = await _post(client, url, payload, idempotency_key, "webhook_failed", "the webhook")
    if response.is_success:
        return
    answer = response.text.strip()[:_SHOWN_BODY]
    retryable = _temporary(response.status_code) or response.status_code in (408, 425)
    where = f" (redirected to {response.headers.get('location')})" if response.is_redirect else ""
    raise StepFailure(
        "webhook_failed",
        f"the webhook at {origin_of(response.request.url)} answered {response.status_code}{where} {answer!r}",
        retryable=retryable,
        details={"status": response.status_code, "body": answer},
        solution="Temporary: the step is retried." if retryable else "Check the webhook URL and the payload.",
    )


async def _post(
    client: httpx.AsyncClient, url: str, payload: Any, idempotency_key: str, code: str, what: str
) -> httpx.Response:
    """POST JSON without following redirects; connection trouble becomes a retryable ``code``."""
    try:
        return await client.post(
            url, json=payload, headers={"Idempotency-Key": idempotency_key}, follow_redirects=False
        )
    except StepFailure:  # the guard's refusals carry their own code and retry decision
        raise
    except httpx.InvalidURL as exc:
        raise StepFailure(code, f"the {what} URL is not valid: {exc}", retryable=False) from exc
    except httpx.HTTPError as exc:
        raise StepFailure(
            code,
            f"could not reach {what} at {origin_of(httpx.URL(url))}: {type(exc).__name__}: {exc}",
            retryable=True,
            solution="Temporary: the step is retried.",
        ) from exc


def _temporary(status: int) -> bool:
    return status == 429 or status >= 500


SIGNATURE_WINDOW = 300.0
"""Seconds a Slack request's timestamp may differ from ours (older ones are replays)."""


def signature_valid(secret: str, timestamp: str, body: bytes, signature: str, now: float) -> bool:
    """Whether a request from Slack is signed with the app's signing secret (Slack's ``v0``
    scheme: HMAC-SHA256 of ``v0:<timestamp>:<body>``) and recent (within ``SIGNATURE_WINDOW``)."""
    try:
        sent = float(timestamp)
    except ValueError:
        return False
    if abs(now - sent) > SIGNATURE_WINDOW:
        return False
    base = b"v0:" + timestamp.encode() + b":" + body
    expected = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)
