"""Secret tokens in links that answer a request without an API key: a person's emailed link
(``user_input``, agent approvals) or an outside system's callback URL (``wait_callback``).

A token is random and used once (the request takes one answer); its row keeps only the token's
SHA-256, mapped to the channel and the person (or system) it was given to, so the database
alone cannot make a working link.
"""

from __future__ import annotations

import hashlib
import secrets

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
