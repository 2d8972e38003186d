"""Free-text replies to requests (issue 14): an emailed reply, or a message in the thread of a
request's Slack message, arrives, is kept, and waits for the workflow's model to read it
(``agentflow.runtime.reply_reader``).

A reply finds its request by the address it was sent to: each request's email carries a
Reply-To of its own (``replies+<request>.<token>@domain``, see ``core.link_tokens``), whose
token is kept hashed with the request like a link's. A message sent to no such address, or
with a token the request does not know, is refused and nothing is kept. The same message
delivered twice is kept once. Automatic replies (out of office, bounces) are kept as
``filtered`` without asking any model.
"""

from __future__ import annotations

from email.errors import MessageError
from typing import Any
from uuid import UUID

from agentflow.core.errors import AuthError, ConfigError
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.link_tokens import REPLY_VIA, holder, read_holder, read_reply_address, token_hash
from agentflow.integrations.inbound_mail import MAX_TEXT, MailUnreadable, read_reply
from agentflow.store import replies, requests
from agentflow.store.database import Database

MAX_MESSAGE_BYTES = 2 * 1024 * 1024
"""The largest raw message taken (attachments are not read; a reply's words are small)."""
OUTCOMES = ("answered", "held", "ignored", "late")


class RequestReplies:
    """The replies of the engine's database."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def receive_email(self, raw: bytes) -> dict[str, Any]:
        """Keep an emailed reply for its request's model to read; the reply (``new``: False
        when this message was received before).

        Raises:
            ConfigError: ``email_unreadable`` (too large, no sender, no text).
            AuthError: ``reply_address_invalid``: sent to no request's reply address, or to
                one whose token the request does not know.
        """
        if len(raw) > MAX_MESSAGE_BYTES:
            raise ConfigError("email_unreadable", f"the message is larger than {MAX_MESSAGE_BYTES} bytes")
        try:
            mail = read_reply(raw)
        except (
            MailUnreadable,
            MessageError,
            ValueError,
            LookupError,
            IndexError,
            AttributeError,
            TypeError,
        ) as exc:
            # The email package raises many kinds of error on garbage; each means "unreadable".
            raise ConfigError(
                "email_unreadable", f"the message cannot be read as a reply: {exc}",
                solution="Post the raw message (RFC 5322) as it arrived, headers included.",
            ) from None  # fmt: skip
        found = None
        for address in mail.recipients:
            parsed = read_reply_address(address)
            if parsed is None:
                continue
            request_id, token = parsed
            link = await requests.find_by_link(self._db.pool, request_id, token_hash(token))
            if link is not None and read_holder(str(link["holder"]))[0] == REPLY_VIA:
                found = (request_id, link)
                break
        if found is None:
            raise AuthError(
                "reply_address_invalid",
                "the message was not sent to any request's reply address",
                solution="Forward replies exactly as they arrived, with their To header.",
            )
        request_id, link = found
        settled = None
        if mail.automatic:
            settled = ("filtered", "ignored", {"reason": "an automatic reply (out of office or a bounce)"})
        elif not mail.text:
            settled = ("filtered", "ignored", {"reason": "the reply has no words of its own"})
        reply, new = await replies.keep(
            self._db.pool, link["workspace_id"], request_id, via="email", message_id=mail.message_id,
            sender=mail.sender, given_to=str(link["holder"]), text=mail.text, settled=settled,
        )  # fmt: skip
        return {**shown(reply), "new": new}

    async def receive_slack(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """Keep a message posted in the thread of a request's Slack message (an Events API
        ``message`` event); None for any other message (not in such a thread, a bot's, an edit).
        """
        channel, thread, ts = event.get("channel"), event.get("thread_ts"), event.get("ts")
        user, text = event.get("user"), event.get("text")
        if not all(isinstance(v, str) and v for v in (channel, thread, ts, user)) or thread == ts:
            return None
        if event.get("bot_id") or event.get("subtype") or not isinstance(text, str):
            return None  # the bot's own messages, edits, joins: not a person's reply
        found = await replies.thread_request(self._db.pool, str(channel), str(thread))
        if found is None:
            return None
        reply, new = await replies.keep(
            self._db.pool, found["workspace_id"], found["request_id"], via="slack",
            message_id=str(event.get("client_msg_id") or f"{channel}:{ts}")[:300], sender=f"slack:{user}",
            given_to=holder("slack", str(channel)), text=text.strip()[:MAX_TEXT],
            settled=None if text.strip() else ("filtered", "ignored", {"reason": "the reply has no words"}),
        )  # fmt: skip
        return {**shown(reply), "new": new}

    async def list(
        self,
        *,
        request_id: UUID | None = None,
        outcome: str | None = None,
        limit: int = 100,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> list[dict[str, Any]]:
        """Replies, newest first: of one request, or those with ``outcome`` (``held``: waiting
        for a person)."""
        found = await replies.list_replies(
            self._db.pool, workspace_id, request_id=request_id, outcome=outcome, limit=limit
        )
        return [shown(r) for r in found]


def shown(reply: dict[str, Any]) -> dict[str, Any]:
    """A reply as the API shows it: ``given_to`` is the person, not the token's holder."""
    return {**reply, "given_to": read_holder(str(reply["given_to"]))[1]}
