"""Secret tokens in links that answer a request without an API key: a person's emailed link
(``user_input``, agent approvals) or an outside system's callback URL (``wait_callback``).

A token is random and used once (the request takes one answer); its row keeps only the token's
SHA-256, mapped to the channel and the person (or system) it was given to, so the database
alone cannot make a working link.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from email.utils import formataddr
from uuid import UUID

ANSWER_PAGE = "/answer"
"""The console's page an emailed link opens: ``<base>/answer#request=<id>&token=<token>`` (the
token stays in the URL's fragment, which browsers never send to a server)."""


def new_token() -> str:
    """A fresh link token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What a request keeps of a link's token (SHA-256, hex)."""
    return hashlib.sha256(token.encode()).hexdigest()


def holder(via: str, to: str) -> str:
    """What a request keeps beside a token's hash: the channel the link went by and to whom
    (``email:lee@example.com``, ``webhook:https://ops.example.com``)."""
    return f"{via}:{to}"


def read_holder(value: str) -> tuple[str, str]:
    """``(channel, to whom)`` of a ``holder`` value."""
    via, _, to = value.partition(":")
    return via, to


REPLY_VIA = "email_reply"
"""The channel of a reply address's token: it answers only through a reply the model reads,
never as a link (a reply address travels in every quoted copy of a thread)."""
REPLY_HINT = "\nOr reply to this email: say what you decide, in your own words.\n"
"""The line a request's email ends with when replies are read."""
REPLY_LOCAL_MAX = 12
"""The longest local part of ``AGENTFLOW_REPLY_TO``: with the request's id and the token the
reply address's local part stays within the 64 characters SMTP allows."""
_REPLY = re.compile(r"\+([a-z2-7]{26})\.([a-z2-7]{24})@", re.IGNORECASE)


def new_reply_token() -> str:
    """A fresh reply token: 120 bits in lower-case base32 (mail systems may fold case)."""
    return base64.b32encode(secrets.token_bytes(15)).decode().lower()


def reply_address(reply_to: str, request_id: UUID, token: str) -> str:
    """``local+<request id>.<token>@domain``: where a reply to a request's email goes."""
    local, _, domain = reply_to.rpartition("@")
    rid = base64.b32encode(request_id.bytes).decode().rstrip("=").lower()
    return f"{local}+{rid}.{token}@{domain}"


def read_reply_address(address: str) -> tuple[UUID, str] | None:
    """``(request id, token)`` of a reply address, or None when it is not one."""
    found = _REPLY.search(address)
    if found is None:
        return None
    rid = base64.b32decode(found.group(1).upper() + "======")
    return UUID(bytes=rid), found.group(2).lower()


def reply_token_for(reply_to: str, request_id: UUID, person: str, address: str) -> tuple[str, str, str]:
    """A new reply address for ``person`` (mailed at ``address``): ``(reply address, token
    hash, holder)``; the hash and holder go into the request's ``link_tokens``."""
    token = new_reply_token()
    return (
        reply_address(reply_to, request_id, token),
        token_hash(token),
        holder(REPLY_VIA, formataddr((person if person != address else "", address))),
    )
