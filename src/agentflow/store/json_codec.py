"""JSON encoding for jsonb columns: fast, and strict about what PostgreSQL cannot store."""

from __future__ import annotations

import re
from typing import Any

import orjson

# An escaped NUL: "\u0000" preceded by an even number of backslashes (none, or escaped ones).
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class UnstorableJson(ValueError):
    """A value cannot be stored as jsonb (not JSON, a NUL character, a lone surrogate)."""


def encode(value: Any) -> str:
    """Encode for a jsonb parameter.

    Raises:
        UnstorableJson: the value is not JSON-serialisable or holds ``\\u0000``.
    """
    try:
        text = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError as exc:
        raise UnstorableJson(str(exc)) from None
    if "\\u0000" in text and _NUL.search(text):
        raise UnstorableJson("PostgreSQL jsonb cannot store the NUL character (\\u0000)")
    return text


def decode(text: str) -> Any:
    """Decode a jsonb value."""
    return orjson.loads(text)


def as_stored(value: Any) -> Any:
    """``value`` as a jsonb column gives it back: JSON types only, and each object's keys in
    jsonb's order (shorter keys first, then by their bytes). A worker that keeps what it wrote
    (an agent run's history) then shows the model what a read would.

    Raises:
        UnstorableJson: as ``encode``.
    """
    return _jsonb_order(decode(encode(value)))


def _jsonb_order(value: Any) -> Any:
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        return {k: _jsonb_order(value[k]) for k in keys}
    if isinstance(value, list):
        return [_jsonb_order(v) for v in value]
    return value
