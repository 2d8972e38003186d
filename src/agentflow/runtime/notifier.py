"""The notifier: delivers the notification outbox by email (SMTP), Slack and webhooks.

A loop beside every worker's claim loop. It claims due rows with a lease, sends each outside
any transaction, and records the outcome. Temporary failures are retried with backoff;
permanent ones (a rejected address, a bad webhook) fail the row with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from uuid import UUID

import httpx

from agentflow.core.errors import ConfigError, StepFailure
from agentflow.integrations.email import EmailSender
from agentflow.integrations.slack import post_slack, post_webhook
from agentflow.integrations.slack_bot import post_message
from agentflow.runtime import companion_spans
from agentflow.store import notifications, replies
from agentflow.store.database import Database, describe, unavailable

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 8
LEASE_SECONDS = 60.0
BATCH = 20


class Notifier:
    """Delivers pending notifications until stopped.

    Args:
        db: the database.
        http: the guarded HTTP client (Slack, webhooks).
        smtp_url / smtp_from: the SMTP server and sender (no URL: email rows fail with a reason).
        slack_bot_token / slack_api_url: the Slack bot that posts to channels by name (none:
            such rows fail with a reason).
        owner: this notifier's lease name.
        poll_interval: the longest it sleeps between looks.
    """

    def __init__(
        self,
        db: Database,
        http: httpx.AsyncClient,
        *,
        smtp_url: str | None,
        smtp_from: str,
        owner: str,
        poll_interval: float = 1.0,
        slack_bot_token: str | None = None,
        slack_api_url: str = "https://slack.com/api",
    ) -> None:
        self._db = db
        self._slack_bot_token = slack_bot_token
        self._slack_api_url = slack_api_url
        self._http = http
        self._owner = owner
        self._poll = poll_interval
        self._stopping = asyncio.Event()
        self._email: EmailSender | None = None
        self._email_problem: str | None = None
        if smtp_url:
            try:
                self._email = EmailSender(smtp_url, smtp_from)
            except ConfigError as exc:
                self._email_problem = exc.info.message
        else:
            self._email_problem = "no SMTP server is configured: set AGENTFLOW_SMTP_URL"

    def stop(self) -> None:
        """Stop after the current batch."""
        self._stopping.set()

    async def run(self) -> None:
        """Deliver until ``stop()``."""
        while not self._stopping.is_set():
            try:
                sent = await self.deliver_due()
                wait = 0.0 if sent == BATCH else await self._sleep_for()
            except Exception as exc:
                if not unavailable(exc):
                    raise
                logger.warning("notifier: database unavailable (%s)", describe(exc))
                wait = self._poll
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), wait)

    async def _sleep_for(self) -> float:
        due = await notifications.seconds_to_next(self._db.pool)
        # Overdue but not claimed (another notifier holds it this instant): look again soon.
        return self._poll if due is None else max(0.05, min(self._poll, due))

    async def deliver_due(self) -> int:
        """Claim and deliver one batch; return how many were claimed."""
        batch = await notifications.claim(self._db.pool, self._owner, BATCH, LEASE_SECONDS)
        await asyncio.gather(*(self._deliver(row) for row in batch))
        return len(batch)

    async def _deliver(self, row: dict[str, Any]) -> None:
        pool, ws, note_id = self._db.pool, row["workspace_id"], row["id"]
        with companion_spans.delivery_span(row) as span:
            try:
                await self._send(row)
            except StepFailure as failure:
                final = not failure.retryable or row["attempts"] >= MAX_ATTEMPTS
                retry_in = None if final else min(2.0 ** row["attempts"], 3600.0)
                logger.warning("notification %s: %s", note_id, failure.info.message)
                companion_spans.end_delivery(span, "failed" if final else "retry", failure.info.code)
                await notifications.mark_failed(
                    pool, ws, note_id, self._owner, failure.info.to_json(), retry_in
                )
                return
            except Exception as exc:  # a bug or an unexpected library error: retry, then give up
                error = {"code": "notification_exception", "message": f"{type(exc).__name__}: {exc}"[:2000]}
                retry_in = None if row["attempts"] >= MAX_ATTEMPTS else min(2.0 ** row["attempts"], 3600.0)
                logger.exception("notification %s failed", note_id)
                companion_spans.end_delivery(span, "retry" if retry_in else "failed", error["code"])
                await notifications.mark_failed(pool, ws, note_id, self._owner, error, retry_in)
                return
            companion_spans.end_delivery(span, "sent")
            await notifications.mark_sent(pool, ws, note_id, self._owner)

    async def _post_as_bot(self, row: dict[str, Any], metadata: dict[str, Any]) -> None:
        """Post with the Slack bot; a request's message is remembered by its thread, whose
        replies answer it (``ReplyReader``)."""
        if self._slack_bot_token is None:
            raise StepFailure(
                "slack_not_configured",
                f"the notification is for the Slack channel {metadata['slack_channel']}, and no Slack bot"
                " token is set: set AGENTFLOW_SLACK_BOT_TOKEN",
                retryable=False,
            )
        text = f"*{row['subject']}*\n{row['body']}" if row["subject"] else row["body"]
        channel, ts = await post_message(
            self._http, self._slack_api_url, self._slack_bot_token, str(metadata["slack_channel"]), text,
            blocks=metadata.get("blocks"),
        )  # fmt: skip
        if metadata.get("request_id") and ts:
            await replies.remember_thread(
                self._db.pool, row["workspace_id"], UUID(str(metadata["request_id"])), channel, ts
            )

    async def _send(self, row: dict[str, Any]) -> None:
        key = str(row["id"])
        channel, metadata = row["channel"], row["metadata"] or {}
        if channel == "email":
            if self._email is None:
                raise StepFailure(
                    "smtp_not_configured", self._email_problem or "no SMTP server", retryable=False
                )
            domain = self._email.sender.domain
            headers = {"X-Agentflow-Notification": key}
            if row["run_id"]:
                headers["X-Agentflow-Run"] = str(row["run_id"])
            if metadata.get("reply_to"):  # a request's reply address (see ReplyReader)
                headers["Reply-To"] = str(metadata["reply_to"])
            await self._email.send(
                row["recipient"], row["subject"] or "(no subject)", row["body"],
                message_id=f"<{key}@{domain}>", headers=headers,
            )  # fmt: skip
        elif channel == "slack" and metadata.get("slack_channel"):
            await self._post_as_bot(row, metadata)
        elif channel == "slack":
            url = metadata.get("slack_webhook_url")
            if not url:
                raise StepFailure(
                    "slack_not_configured", "the notification names no Slack webhook", retryable=False
                )
            text = f"*{row['subject']}*\n{row['body']}" if row["subject"] else row["body"]
            await post_slack(self._http, url, text, idempotency_key=key, blocks=metadata.get("blocks"))
        elif channel == "webhook":
            payload = {"id": key, "subject": row["subject"], "body": row["body"], "kind": row["kind"]}
            if "data" in metadata:  # e.g. a wait_callback's URL and data
                payload["data"] = metadata["data"]
            await post_webhook(self._http, row["recipient"], payload, key)
        else:
            raise StepFailure("channel_unknown", f"cannot deliver channel {channel!r}", retryable=False)
