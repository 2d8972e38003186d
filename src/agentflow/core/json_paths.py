"""Paths into JSON documents: ``data.items[0].name``, with the flat-key fallback.

Used by conditions (and, later, debounce keys): a missing path resolves to ``ABSENT``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, NamedTuple

from agentflow.core.condition_ops import ABSENT


class Segment(NamedTuple):
    """One step of a path: a key, or a list index (``items.0`` or ``items[0]``)."""

    text: str
    list_index: int | None
    bracket: bool


_PATH = re.compile(r"(?:[^.\[\]]+|\[\d+\])(?:\.[^.\[\]]+|\[\d+\])*")
_SEGMENT = re.compile(r"\.?([^.\[\]]+)|\[(\d+)\]")


@lru_cache(maxsize=4096)
def parse_path(path: str) -> tuple[Segment, ...]:
    """Split ``"data.items[0].name"`` into segments.

    Raises:
        ValueError: the path is empty, too long or malformed.
    """
    if len(path) > 500 or not _PATH.fullmatch(path):
        raise ValueError(f"invalid path {path!r}; use names separated by dots, e.g. data.items[0].name")
    out = []
    for match in _SEGMENT.finditer(path):
        name, digits = match.groups()
        text = name if name is not None else digits
        out.append(Segment(text, int(text) if text.isascii() and text.isdigit() else None, name is None))
    if len(out) > 64:
        raise ValueError(f"path {path!r} has more than 64 segments")
    return tuple(out)


def resolve(document: Any, path: str) -> Any:
    """The value at ``path`` in ``document``, or ``ABSENT``.

    Dot paths come first; a key that itself contains dots is found as a fallback
    (``a.b`` finds ``{"a.b": 1}``, seed 002's debounce-key rule). Digits index lists.

    Raises:
        ValueError: the path is malformed (a parsed ``Rule`` always has a valid one).
    """
    found, value = _walk(document, parse_path(path), 0, [256])
    return value if found else ABSENT


def _walk(node: Any, segments: tuple[Segment, ...], i: int, budget: list[int]) -> tuple[bool, Any]:
    if i == len(segments):
        return True, node
    budget[0] -= 1
    if budget[0] < 0:
        return False, None
    segment = segments[i]
    if isinstance(node, dict):
        key, j = segment.text, i
        while True:
            if key in node:
                found, value = _walk(node[key], segments, j + 1, budget)
                if found:
                    return True, value
            j += 1
            if segment.bracket or j >= len(segments) or segments[j].bracket:
                return False, None
            key = f"{key}.{segments[j].text}"
    if isinstance(node, list | tuple) and segment.list_index is not None and segment.list_index < len(node):
        return _walk(node[segment.list_index], segments, i + 1, budget)
    return False, None
