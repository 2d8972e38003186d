"""``payload_format``: the fields a workflow's input must have, checked when a run starts.

Canonical form: ``{"account_id": {"type": "string", "description": "...", "required": true}}``.
The legacy shape ``{"account_id": "string"}`` is read too (seed 002). Field names may be
dotted (``customer.email``): the payload's nested fields are looked up first, then a flat key.
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentflow.core.condition_ops import ABSENT
from agentflow.core.json_paths import resolve

FieldType = Literal["string", "number", "boolean", "date", "datetime"]
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class FieldSpec(BaseModel):
    """One expected input field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: FieldType
    description: str | None = Field(default=None, max_length=2000)
    required: bool = True


def normalise(raw: Any) -> Any:
    """Turn the legacy ``{"name": "string"}`` shape into the canonical one (pydantic validates the rest)."""
    if isinstance(raw, dict):
        return {name: {"type": spec} if isinstance(spec, str) else spec for name, spec in raw.items()}
    return raw


def payload_errors(fields: dict[str, FieldSpec], payload: Any) -> list[dict[str, str]]:
    """Every way ``payload`` falls short of ``fields``, as ``{"path", "message"}`` items."""
    if not isinstance(payload, dict):
        return [{"path": "payload", "message": "the payload must be a JSON object"}]
    errors = []
    for name, spec in fields.items():
        value = resolve(payload, name)
        path = f"payload.{name}"
        if value is ABSENT or value is None:
            if spec.required:
                errors.append({"path": path, "message": f"required ({spec.type})"})
            continue
        problem = type_problem(spec.type, value)
        if problem:
            errors.append({"path": path, "message": problem})
    return errors


def type_problem(kind: FieldType, value: Any) -> str | None:
    """Why ``value`` (not None) is not of type ``kind``, or None when it is."""
    if kind == "string":
        return None if isinstance(value, str) else f"must be a string, not {describe_kind(value)}"
    if kind == "boolean":
        return None if isinstance(value, bool) else f"must be true or false, not {describe_kind(value)}"
    if kind == "number":
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        return None if ok else f"must be a number, not {describe_kind(value)}"
    if not isinstance(value, str):
        return f"must be a {kind} string, not {describe_kind(value)}"
    try:
        if kind == "date":
            if not _DATE.match(value):
                raise ValueError
            date.fromisoformat(value)
        else:
            datetime.fromisoformat(value)
    except ValueError:
        example = "2026-01-31" if kind == "date" else "2026-01-31T09:30:00Z"
        return f"must be an ISO 8601 {kind} such as {example}, not {value[:50]!r}"
    return None


_KINDS = {
    bool: "a boolean",
    int: "a number",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "an object",
}


def describe_kind(value: Any) -> str:
    """The JSON kind of ``value`` for messages: "a string", "a number", "an object"..."""
    return _KINDS.get(type(value), type(value).__name__)


def with_nested_keys(payload: Any) -> Any:
    """``payload`` where each flat dotted key (``"customer.email"``) is also reachable nested
    (``payload.customer.email`` in a template), as ``payload_format`` finds it. A nested value
    that is already there wins; the flat key stays too. Other values are returned as they are.
    """
    if not isinstance(payload, dict) or not any("." in key for key in payload):
        return payload
    view: dict[str, Any] = dict(payload)
    for key, value in payload.items():
        parts = key.split(".")
        if len(parts) < 2 or not all(parts):
            continue
        target = view
        for part in parts[:-1]:
            found = target.get(part)
            if found is None:
                found = target[part] = {}
            elif not isinstance(found, dict):
                break  # a scalar is already there: the nested path cannot exist
            else:
                found = target[part] = dict(found)  # copy: the payload itself stays as it came
            target = found
        else:
            target.setdefault(parts[-1], value)
    return view
