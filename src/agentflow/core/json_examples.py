"""A small value that a JSON Schema accepts, for the offline scripted model's structured answers.

Covers what workflow schemas use: objects (required properties, else all declared), arrays
(``minItems`` items), strings (``enum``, ``const``, ``minLength``, common formats), numbers and
integers (``minimum``, ``exclusiveMinimum``), booleans, null, ``anyOf``/``oneOf`` (the first).
A schema it cannot satisfy gets its best try; the caller validates.
"""

from __future__ import annotations

from typing import Any

_FORMATS = {
    "date-time": "2026-01-01T00:00:00Z",
    "date": "2026-01-01",
    "time": "00:00:00Z",
    "email": "someone@example.com",
    "uri": "https://example.com",
    "uuid": "00000000-0000-4000-8000-000000000000",
}
MAX_DEPTH = 8


def example_of(schema: Any, depth: int = 0) -> Any:
    """A value ``schema`` accepts (as far as this simple reading of it goes)."""
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return None
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return example_of(schema[key][0], depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties") or {}
        wanted = schema.get("required") or list(properties)
        return {name: example_of(properties.get(name, {}), depth + 1) for name in wanted}
    if kind == "array":
        count = int(schema.get("minItems") or 0)
        return [example_of(schema.get("items", {}), depth + 1) for _ in range(count)]
    if kind == "string":
        if schema.get("format") in _FORMATS:
            return _FORMATS[schema["format"]]
        return "x" * max(int(schema.get("minLength") or 0), 1)
    if kind in ("number", "integer"):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        value = (
            0 if low is None else low + (1 if "exclusiveMinimum" in schema and "minimum" not in schema else 0)
        )
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return False
    return None
