"""Whether a value described by a JSON Schema can have a given path (``customer.email``).

Publishing uses this to check ``{{ input.x }}`` against what a predecessor declares it
sends. The answer errs towards yes: only a schema that rules the path out (an object with
``additionalProperties: false`` and no such property, a scalar type) says no.
"""

from __future__ import annotations

from typing import Any

import jsonschema

from agentflow.core.templating.references import Path

_SCALARS = {"string", "number", "integer", "boolean", "null"}


def can_have(schema: dict[str, Any], path: Path) -> bool:
    """True unless ``schema`` rules out a value at ``path``."""
    if not path:
        return True
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return any(can_have(branch, path) for branch in schema[key])
    head, rest = path[0], path[1:]
    types = schema.get("type")
    kinds = set(types) if isinstance(types, list) else {types} if isinstance(types, str) else set()
    if kinds and kinds <= _SCALARS:
        return False
    if "array" in kinds and (isinstance(head, int) or head.isdigit()):
        items = schema.get("items")
        return can_have(items if isinstance(items, dict) else {}, rest)
    if kinds == {"array"}:
        return False  # a list has no named keys
    properties = schema.get("properties", {})
    if isinstance(head, str) and head in properties:
        return can_have(properties[head], rest)
    extra = schema.get("additionalProperties", True)
    if extra is False:
        return False
    return can_have(extra if isinstance(extra, dict) else {}, rest)


def keys_of(schema: dict[str, Any]) -> list[str]:
    """The property names ``schema`` declares (for an error message), in order."""
    names: list[str] = list(schema.get("properties", {}))
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key, ()):
            names.extend(n for n in keys_of(branch) if n not in names)
    return names


def checked_object_schema(value: dict[str, Any] | None, field: str, hint: str = "") -> dict[str, Any] | None:
    """``value`` when it is a valid JSON Schema of an object (a node's ``output_schema``, a
    form), for a pydantic validator.

    Raises:
        ValueError: naming ``field`` and what is wrong (``hint`` added to the type error).
    """
    if value is None:
        return None
    try:
        jsonschema.Draft202012Validator.check_schema(value)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"{field} is not a valid JSON Schema: {exc.message}") from None
    if value.get("type") != "object":
        raise ValueError(f"{field} must have type 'object' at the top{hint}")
    return value
