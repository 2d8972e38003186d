"""Checking a JSON document against a JSON Schema: every problem, each with where it is.

Building a ``jsonschema`` validator costs far more than validating a small document with it
(an agent's tool call: arguments of a few fields), and the same few schemas are checked at
every step, so validators are kept by their schema's canonical JSON.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from jsonschema.protocols import Validator

MAX_PROBLEMS = 20
_KEPT = 256


class _Kept:
    """A schema's validator, and whether the schema itself is valid (None: not asked yet)."""

    __slots__ = ("sound", "validator")

    def __init__(self, validator: Validator) -> None:
        self.validator = validator
        self.sound: bool | None = None


_VALIDATORS: dict[bytes, _Kept] = {}


def validator_for(schema: dict[str, Any], *, checked: bool = False) -> Validator | None:
    """A validator of ``schema``'s own draft (2020-12 when it names none). With ``checked``,
    None when the schema itself is not valid JSON Schema (it is checked once)."""
    try:
        key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not JSON (a Python object in it): not kept
        kept = _Kept(_built(schema))
    else:
        found = _VALIDATORS.get(key)
        if found is None:
            if len(_VALIDATORS) >= _KEPT:
                _VALIDATORS.clear()
            found = _VALIDATORS[key] = _Kept(_built(schema))
        kept = found
    if checked and kept.sound is None:
        try:
            type(kept.validator).check_schema(schema)
        except jsonschema.SchemaError:
            kept.sound = False
        else:
            kept.sound = True
    return None if checked and not kept.sound else kept.validator


def problems(
    schema: dict[str, Any], document: Any, *, whole: str = "(arguments)", checked: bool = False
) -> list[str]:
    """Every way ``document`` breaks ``schema``, as ``path: message`` (``whole`` names the
    document itself), ordered by path, at most ``MAX_PROBLEMS``; empty when it is valid, and
    with ``checked`` when the schema itself is not valid JSON Schema."""
    validator = validator_for(schema, checked=checked)
    if validator is None:
        return []
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or whole}: {error.message[:300]}"
        for error in errors[:MAX_PROBLEMS]
    ]


def _built(schema: dict[str, Any]) -> Validator:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)
