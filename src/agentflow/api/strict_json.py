"""Strict JSON for request bodies: refuse what PostgreSQL jsonb cannot store, before it gets there.

Python's ``json`` module accepts things the engine must not: ``NaN``/``Infinity``, numbers
that overflow to infinity (``1e400``), integers beyond 64 bits, lone UTF-16 surrogates
(``"\\ud800"``) and the NUL character (jsonb refuses both), and nesting deep enough to exhaust
the stack. ``parse`` rejects each with its own stable error code.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 64
"""The deepest nesting of arrays and objects a body may have."""

_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class JsonRejected(Exception):
    """A body that is not acceptable JSON.

    Attributes:
        code: the stable error code (``invalid_json``, ``too_deep``, ``unstorable_text``,
            ``number_out_of_range``).
        message: what is wrong, for people.
        path: where in the document, when known (``payload.items[2]``).
    """

    def __init__(self, code: str, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.path = path


def parse(body: bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse a UTF-8 JSON body strictly.

    Args:
        body: the raw request body.
        max_depth: the deepest nesting allowed (the top-level container is depth 1).

    Returns:
        The parsed value.

    Raises:
        JsonRejected: the body is not acceptable; see the class for the codes.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonRejected("invalid_json", f"the body is not valid UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise JsonRejected(
            "invalid_json", f"the body is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise JsonRejected("too_deep", f"the JSON nests deeper than {max_depth} levels") from None
    except ValueError:  # an integer with more digits than Python converts
        raise JsonRejected("number_out_of_range", "an integer in the body is too large to store") from None
    if not _acceptable(value, max_depth):
        _explain(value, max_depth)
    return value


def _reject_constant(name: str) -> Any:
    raise JsonRejected("invalid_json", f"{name} is not valid JSON")


def _acceptable(value: Any, max_depth: int) -> bool:
    """The fast pass (no paths): True when nothing is wrong."""
    if type(value) not in (dict, list):
        return _scalar_ok(value)
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return False
        if type(item) is dict:
            if any(_UNSTORABLE.search(key) for key in item):
                return False
            item = item.values()
        for child in item:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1))
            elif not _scalar_ok(child):
                return False
    return True


def _scalar_ok(value: Any) -> bool:
    kind = type(value)
    if kind is str:
        return _UNSTORABLE.search(value) is None
    if kind is int:
        return bool(_INT_MIN <= value <= _INT_MAX)
    if kind is float:
        return math.isfinite(value)
    return True


def _explain(value: Any, max_depth: int) -> None:
    """The slow pass, run only when the fast one found a problem: raise it with its path."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                raise JsonRejected("too_deep", f"the JSON nests deeper than {max_depth} levels", _short(path))
            if isinstance(item, dict):
                for key, child in item.items():
                    _check_text(key, path, "a key")
                    stack.append((child, depth + 1, f"{path}.{key}" if path else key))
            else:
                stack.extend((child, depth + 1, f"{path}[{i}]") for i, child in enumerate(item))
        elif isinstance(item, str):
            _check_text(item, path, "a string")
        elif not _scalar_ok(item):
            where = _short(path) or "(root)"
            raise JsonRejected("number_out_of_range", f"the number at {where} is too large to store", where)


def _check_text(text: str, path: str, what: str) -> None:
    found = _UNSTORABLE.search(text)
    if found is None:
        return
    char = found.group()
    name = "the NUL character (\\u0000)" if char == "\x00" else f"a lone surrogate (\\u{ord(char):04x})"
    where = _short(path) or "(root)"
    raise JsonRejected("unstorable_text", f"{what} at {where} holds {name}, which cannot be stored", where)


def _short(path: str) -> str:
    return path if len(path) <= 200 else path[:199] + "…"
