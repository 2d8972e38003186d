"""``output_params``: what a node declares it sends, and the shaping that makes it so.

Seed 001's output shaping: a node's output keeps only its declared parameters, each coerced
to its type (``"42"`` to the number 42, ``1`` to the string ``"1"``), with its default when
missing. The declaration is also the node's output schema, so an ``{{ input.x }}`` after it
is checked at publish. A value that cannot be coerced fails the step with ``output_invalid``,
naming the node, the parameter and what was expected (not retried: the same input gives the
same output).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentflow.core.errors import StepFailure

ParamType = Literal["string", "number", "integer", "boolean", "array", "object", "any"]
MAX_PARAMS = 100


class OutputParam(BaseModel):
    """One declared output parameter.

    Attributes:
        type: what the value must be (coerced when it can be).
        default: the value when the node's output lacks it (else null).
        description: for people and builders.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: ParamType = "any"
    default: Any = None
    description: str | None = Field(default=None, max_length=2000)


def params_schema(params: dict[str, OutputParam]) -> dict[str, Any]:
    """The JSON Schema of an output shaped by ``params``: exactly those keys."""
    return {
        "type": "object",
        "properties": {name: ({} if p.type == "any" else {"type": p.type}) for name, p in params.items()},
        "additionalProperties": False,
    }


def shape_output(node_id: str, params: dict[str, OutputParam], output: Any) -> dict[str, Any]:
    """``output`` with only the declared parameters, each coerced, defaults filled in.

    Raises:
        StepFailure: ``output_invalid`` (not retryable) naming the node and parameter.
    """
    if not isinstance(output, dict):
        raise _invalid(node_id, None, "an object", output)
    shaped: dict[str, Any] = {}
    for name, param in params.items():
        value = output.get(name)
        if value is None:
            shaped[name] = param.default
            continue
        coerced = _coerce(param.type, value)
        if coerced is _NO:
            raise _invalid(node_id, name, param.type, value)
        shaped[name] = coerced
    return shaped


_NO = object()


def _coerce(kind: ParamType, value: Any) -> Any:
    if kind == "any":
        return value
    if kind == "string":
        if isinstance(value, str):
            return value
        return str(value).lower() if isinstance(value, bool) else str(value) if _is_number(value) else _NO
    if kind in ("number", "integer"):
        number = value if _is_number(value) else _parse_number(value)
        if number is _NO:
            return _NO
        if kind == "integer":
            return int(number) if float(number).is_integer() else _NO
        return number
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        truth = {"true": True, "false": False, "1": True, "0": False}
        key = str(value).strip().lower() if isinstance(value, str | int) else None
        return truth.get(key, _NO) if key is not None else _NO
    wanted = list if kind == "array" else dict
    return value if isinstance(value, wanted) else _NO


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _parse_number(value: Any) -> Any:
    if not isinstance(value, str):
        return _NO
    try:
        number = float(value.strip())
    except ValueError:
        return _NO
    if not math.isfinite(number):
        return _NO
    return int(number) if number.is_integer() and "." not in value and "e" not in value.lower() else number


def _invalid(node_id: str, name: str | None, expected: str, got: Any) -> StepFailure:
    where = f"output parameter {name!r}" if name else "output"
    kind = "null" if got is None else type(got).__name__
    return StepFailure(
        "output_invalid",
        f"node {node_id!r} {where} must be {expected}, not {kind} {str(got)[:80]!r}",
        retryable=False,
        details={"node": node_id, "parameter": name, "expected": expected, "got": kind},
        solution="Change what the node returns, or the type its output_params declare.",
    )
