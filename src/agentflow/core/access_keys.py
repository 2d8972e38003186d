"""Access keys: their format, generation and constant-time checking (no I/O).

A key reads ``<prefix>_<id>_<secret>``: ``afk`` keys authenticate the private API (``Authorization:
Bearer``), ``aft`` keys the public trigger URLs. The id finds the stored row; the secret is
stored only as its SHA-256 and compared with ``hmac.compare_digest``. Secrets carry 256
random bits, so a fast hash is enough (a slow password hash adds nothing against guessing).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Literal

from agentflow.core.frozen import frozen

KeyKind = Literal["api", "trigger"]
PREFIXES: dict[KeyKind, str] = {"api": "afk", "trigger": "aft"}
_KEY = re.compile(r"^(afk|aft)_([0-9a-f]{16})_([A-Za-z0-9_\-]{43})$")
_DUMMY_HASH = hashlib.sha256(b"agentflow-no-such-key").digest()
_CONTROL = "\x00-\x1f\x7f-\x9f"
NAME_PATTERN = rf"^[^{_CONTROL}]*[^{_CONTROL}\s][^{_CONTROL}]*$"
"""A key's name: no control characters, and something besides spaces (what the API declares
and ``name_is_valid`` checks, so a request the schema allows is never refused)."""


def name_is_valid(name: str) -> bool:
    """Whether ``name`` (already stripped) may name a key: 1 to 100 characters, none a control."""
    return 1 <= len(name) <= 100 and re.match(NAME_PATTERN, name) is not None


@frozen
class NewKey:
    """A generated key: store ``id`` and ``secret_hash``; show ``token`` once."""

    kind: KeyKind
    id: str
    token: str
    secret_hash: bytes


@frozen
class PresentedKey:
    """A key as a client sent it, split into its parts."""

    kind: KeyKind
    id: str
    secret: str


def generate_key(kind: KeyKind) -> NewKey:
    """A new random key of ``kind``."""
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    return NewKey(kind, key_id, f"{PREFIXES[kind]}_{key_id}_{secret}", hash_secret(secret))


def parse_key(token: str) -> PresentedKey | None:
    """Split a presented key; None when it cannot be a key (wrong shape or prefix)."""
    match = _KEY.fullmatch(token.strip()) if len(token) <= 200 else None
    if match is None:
        return None
    kind: KeyKind = "api" if match.group(1) == "afk" else "trigger"
    return PresentedKey(kind, match.group(2), match.group(3))


def hash_secret(secret: str) -> bytes:
    """SHA-256 of a key's secret part, as stored."""
    return hashlib.sha256(secret.encode()).digest()


def secret_matches(presented: PresentedKey | None, stored_hash: bytes | None) -> bool:
    """Compare in constant time; a missing key or row still costs one comparison."""
    given = hash_secret(presented.secret) if presented is not None else _DUMMY_HASH
    expected = stored_hash if stored_hash is not None else _DUMMY_HASH
    return hmac.compare_digest(given, expected) and presented is not None and stored_hash is not None
