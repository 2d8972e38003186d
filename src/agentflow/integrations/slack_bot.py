"""Post to Slack as the app's bot (Web API ``chat.postMessage``): unlike an incoming webhook it
answers with the message's channel id and ``ts``, which a reply in its thread names.

Slack answers 200 with ``{"ok": false, "error": ...}`` for most refusals; ``ratelimited`` (and
429, 5xx, connection trouble) is temporary, everything else (a wrong token, a channel the bot
is not in) stays wrong until a person fixes it.
"""

from __future__ import annotations

from typing import Any

import httpx

from agentflow.core.errors import StepFailure
from agentflow.integrations.http_errors import origin_of

_HINTS = {
    "not_authed": "Set AGENTFLOW_SLACK_BOT_TOKEN to the Slack app's bot token (xoxb-...).",
    "invalid_auth": "AGENTFLOW_SLACK_BOT_TOKEN is wrong or revoked: copy the bot token again.",
    "account_inactive": "The Slack app was removed or its token revoked: reinstall it.",
    "channel_not_found": "The channel does not exist, or is private and the bot is not in it: invite it.",
    "not_in_channel": "Invite the bot to the channel (/invite @your-app).",
    "is_archived": "The channel is archived: unarchive it or ask in another.",
    "missing_scope": "Give the Slack app the chat:write scope and reinstall it.",
    "msg_too_long": "The message is too long for Slack.",
    "invalid_blocks": "The message's blocks are malformed.",
}
_TEMPORARY = ("ratelimited", "fatal_error", "internal_error", "service_unavailable", "request_timeout")


async def post_message(
    client: httpx.AsyncClient,
    api_url: str,
    token: str,
    channel: str,
    text: str,
    *,
    blocks: list[dict[str, Any]] | None = None,
) -> tuple[str, str]:
    """Post ``text`` (and Block Kit ``blocks``) to ``channel``; the posted message's
    ``(channel id, ts)``.

    Args:
        client: the guarded HTTP client.
        api_url: Slack's Web API base (``https://slack.com/api``).
        token: the bot token.
        channel: ``#name`` or an id.

    Raises:
        StepFailure: ``slack_failed``, retryable for rate limits, 5xx and connection errors,
            with Slack's error code and what to do about it.
    """
    payload: dict[str, Any] = {"channel": channel, "text": text}
    if blocks is not None:
        payload["blocks"] = blocks
    url = f"{api_url.rstrip('/')}/chat.postMessage"
    try:
        response = await client.post(
            url, json=payload, headers={"Authorization": f"Bearer {token}"}, follow_redirects=False
        )
    except StepFailure:
        raise
    except httpx.HTTPError as exc:
        raise StepFailure(
            "slack_failed",
            f"could not reach Slack at {origin_of(httpx.URL(url))}: {type(exc).__name__}",
            retryable=True,
            solution="Temporary: the step is retried.",
        ) from exc
    try:
        answer = response.json()
    except ValueError:
        answer = {}
    if response.is_success and isinstance(answer, dict) and answer.get("ok") is True:
        return str(answer.get("channel") or channel), str(answer.get("ts") or "")
    error = str(answer.get("error") if isinstance(answer, dict) else "") or response.text.strip()[:300]
    retryable = response.status_code == 429 or response.status_code >= 500 or error in _TEMPORARY
    raise StepFailure(
        "slack_failed",
        f"Slack's chat.postMessage to {channel} answered {response.status_code} {error!r}",
        retryable=retryable,
        details={"status": response.status_code, "error": error, "channel": channel},
        solution=_HINTS.get(error)
        or ("Temporary: the step is retried." if retryable else "Check the channel."),
    )
