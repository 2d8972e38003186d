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


def canonical(value: Any) -> Any:
    """``value`` with JSON types only and every object's keys sorted: the same whether it is
    the value a worker wrote or the one a jsonb column gives back (jsonb reorders keys). An
    agent run's history is kept in this form, read or written, so the model is shown the same.

    Raises:
        UnstorableJson: as ``encode``.
    """
    try:
        return orjson.loads(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS))
    except TypeError as exc:
        raise UnstorableJson(str(exc)) from None
