"""Identifiers: the default workspace, and time-ordered ids (UUID version 7, RFC 9562) for
messages without an id."""

from __future__ import annotations

from uuid import UUID

DEFAULT_WORKSPACE = UUID("00000000-0000-0000-0000-000000000001")
"""The workspace every installation starts with (created by the first migration)."""


def uuid7(unix_ms: int, random_bytes: bytes) -> UUID:
    """A UUIDv7 from a millisecond timestamp and 10 random bytes.

    Ids made later sort after ids made earlier (to the millisecond), so a log ordered by
    id is roughly ordered by time; the random part keeps them unique.
    """
    if len(random_bytes) < 10:
        raise ValueError("uuid7 needs 10 random bytes")
    value = (unix_ms & (2**48 - 1)) << 80
    value |= 0x7 << 76  # version
    value |= (int.from_bytes(random_bytes[:2], "big") & 0x0FFF) << 64
    value |= 0b10 << 62  # variant
    value |= int.from_bytes(random_bytes[2:10], "big") & (2**62 - 1)
    return UUID(int=value)


def as_uuid(ref: UUID | str) -> UUID | None:
    """``ref`` as a UUID when it is one (or the text of one), else None (a name, say)."""
    if isinstance(ref, UUID):
        return ref
    try:
        return UUID(ref)
    except ValueError:
        return None
