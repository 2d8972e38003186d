"""Checking a JSON document against a JSON Schema: every problem, each with where it is.

Building a ``jsonschema`` validator costs far more than validating a small document with it
(an agent's tool call: arguments of a few fields), and the same few schemas are checked at
every step, so validators are kept by their schema's canonical JSON.

A document is first checked by ``jsonschema-rs`` (compiled, a hundred times faster than the
reference validator on a tool call's arguments: 0.2 against 20 µs). When it says the document
is valid, that is the answer; otherwise, or when it cannot check the schema or the document,
``jsonschema`` decides and lists the problems, so every message and every refusal stays the
reference validator's. It never fetches a ``$ref`` and asserts no ``format`` (as
``jsonschema`` is used here), so it can only be stricter than the reference in corners of
the regular-expression dialects (an Arabic-Indic digit is no ``\\d`` to it), and there the
reference decides.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import jsonschema_rs
import orjson
from jsonschema.protocols import Validator

MAX_PROBLEMS = 20
_KEPT = 256


class _Kept:
    """A schema's validators, and whether the schema itself is valid (None: not asked yet).

    ``fast``: the compiled validator, None when ``jsonschema-rs`` cannot build one (the
    reference validator then checks every document).
    """

    __slots__ = ("fast", "sound", "validator")

    def __init__(self, schema: dict[str, Any]) -> None:
        self.validator = _built(schema)
        self.fast = _compiled(schema)
        self.sound: bool | None = None


_VALIDATORS: dict[bytes, _Kept] = {}


def validator_for(schema: dict[str, Any], *, checked: bool = False) -> Validator | None:
    """A validator of ``schema``'s own draft (2020-12 when it names none). With ``checked``,
    None when the schema itself is not valid JSON Schema (it is checked once)."""
    kept = _kept(schema, checked=checked)
    return None if kept is None else kept.validator


def problems(
    schema: dict[str, Any], document: Any, *, whole: str = "(arguments)", checked: bool = False
) -> list[str]:
    """Every way ``document`` breaks ``schema``, as ``path: message`` (``whole`` names the
    document itself), ordered by path, at most ``MAX_PROBLEMS``; empty when it is valid, and
    with ``checked`` when the schema itself is not valid JSON Schema."""
    kept = _kept(schema, checked=checked)
    if kept is None:
        return []
    if kept.fast is not None:
        try:
            if kept.fast.is_valid(document):
                return []
        except Exception:  # not a JSON document to it, or a regex it gave up on: the reference decides
            pass
    errors = sorted(kept.validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or whole}: {error.message[:300]}"
        for error in errors[:MAX_PROBLEMS]
    ]


def _kept(schema: dict[str, Any], *, checked: bool) -> _Kept | None:
    try:
        key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not JSON (a Python object in it): not kept
        kept = _Kept(schema)
    else:
        found = _VALIDATORS.get(key)
        if found is None:
            if len(_VALIDATORS) >= _KEPT:
                _VALIDATORS.clear()
            found = _VALIDATORS[key] = _Kept(schema)
        kept = found
    if checked and kept.sound is None:
        try:
            type(kept.validator).check_schema(schema)
        except jsonschema.SchemaError:
            kept.sound = False
        else:
            kept.sound = True
    return None if checked and not kept.sound else kept


def _built(schema: dict[str, Any]) -> Validator:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)


def _compiled(schema: dict[str, Any]) -> jsonschema_rs.Validator | None:
    """``schema`` compiled, or None when it cannot be (a ``$ref`` outside it, a pattern of
    another dialect, not JSON): offline, formats as annotations, as the reference is used."""
    try:
        return jsonschema_rs.validator_for(schema, validate_formats=False, offline=True)
    except Exception:  # whatever it refuses, the reference validator checks
        return None
