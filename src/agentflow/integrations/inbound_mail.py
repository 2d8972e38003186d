"""Read an emailed reply (raw RFC 5322 bytes): who sent it, to which addresses, its own words.

What a person typed is separated from what the mail program quoted below it (``>`` lines,
"On ... wrote:", Outlook's "-----Original Message-----" and its "From:" block), so the model
that reads the reply sees the answer, not the request again. Automatic replies (out of
office, bounces) are recognised by their headers (RFC 3834 ``Auto-Submitted``) and never
reach a model.
"""

from __future__ import annotations

import email.policy
import hashlib
import re
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import getaddresses
from html.parser import HTMLParser

from agentflow.core.frozen import frozen

MAX_TEXT = 8000
"""Characters of a reply's own text that are kept (the rest is cut)."""
_QUOTE_STARTS = (
    re.compile(r"^\s*On\b.{0,300}\bwrote:\s*$", re.IGNORECASE),
    re.compile(r"^\s*-{2,}\s*Original Message\s*-{2,}\s*$", re.IGNORECASE),
    re.compile(r"^\s*_{10,}\s*$"),
    re.compile(r"^\s*From:\s.+$"),
)
_RECIPIENT_HEADERS = ("To", "Cc", "Delivered-To", "X-Original-To", "Envelope-To")


class MailUnreadable(ValueError):
    """The bytes are not an email this reader can take (no sender, no text)."""


@frozen
class InboundReply:
    """What an emailed reply says.

    Attributes:
        message_id: its Message-ID (or a digest of the bytes when it has none).
        sender: the From address, lower case.
        recipients: every address it was sent to (To, Cc, Delivered-To and the like).
        subject: the Subject header.
        text: the sender's own words, quoted text removed, at most ``MAX_TEXT`` characters.
        automatic: an auto-reply or a bounce (``Auto-Submitted``, ``Precedence``, a null sender).
    """

    message_id: str
    sender: str
    recipients: tuple[str, ...]
    subject: str
    text: str
    automatic: bool


def read_reply(raw: bytes) -> InboundReply:
    """Parse one message.

    Raises:
        MailUnreadable: no From address, or no text part at all.
    """
    message = BytesParser(policy=email.policy.default).parsebytes(raw)
    assert isinstance(message, EmailMessage)
    senders = [addr for _name, addr in getaddresses([str(v) for v in message.get_all("From", [])]) if addr]
    if not senders:
        raise MailUnreadable("the message has no From address")
    recipients = tuple(
        addr.lower()
        for _name, addr in getaddresses([str(v) for h in _RECIPIENT_HEADERS for v in message.get_all(h, [])])
        if addr
    )
    text = _own_words(_body_text(message))
    message_id = str(message.get("Message-ID") or "").strip()[:300]
    return InboundReply(
        message_id=message_id or "sha256:" + hashlib.sha256(raw).hexdigest(),
        sender=senders[0].lower(),
        recipients=recipients,
        subject=str(message.get("Subject") or "")[:300],
        text=text[:MAX_TEXT],
        automatic=_automatic(message),
    )


def _body_text(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        raise MailUnreadable("the message has no text or HTML part")
    assert isinstance(part, EmailMessage)
    content = part.get_content()
    if not isinstance(content, str):
        raise MailUnreadable("the message's text part could not be decoded")
    return _html_text(content) if part.get_content_subtype() == "html" else content


def _own_words(text: str) -> str:
    """The lines above the first quoted line or quote header."""
    kept: list[str] = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.lstrip().startswith(">") or any(p.match(line) for p in _QUOTE_STARTS):
            break
        kept.append(line)
    return "\n".join(kept).strip()


def _automatic(message: EmailMessage) -> bool:
    auto = str(message.get("Auto-Submitted") or "no").strip().lower()
    precedence = str(message.get("Precedence") or "").strip().lower()
    return (
        auto != "no"
        or precedence in ("bulk", "junk", "auto_reply", "list")
        or message.get("X-Autoreply") is not None
        or message.get("X-Autorespond") is not None
        or str(message.get("Return-Path") or "").strip() == "<>"
    )


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style", "blockquote"):
            self._skip += 1
        elif tag in ("br", "p", "div", "li", "tr"):
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "blockquote") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def _html_text(html: str) -> str:
    """The visible text of an HTML part, quoted blocks (``<blockquote>``) left out."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    return re.sub(r"\n\s*\n+", "\n\n", "".join(parser.parts))
