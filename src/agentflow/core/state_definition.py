"""``state_definition``: a run's declared variables, checked when a run starts and when a node saves.

Canonical form: ``{"attempts": {"type": "number", "description": "...", "default": 0}}``. The
legacy shape ``{"attempts": "number"}`` is read too (seed 002). Every declared variable is
always present in a run: the value it was started with, else its default, else null (unset),
so ``{{ state.x }}`` tells a typo (an error) from an unset variable (``none``).

The variables are stored in the run's state document and rewritten by every checkpoint, so they
are bounded: at most ``MAX_VARIABLES`` of them, ``MAX_STATE_BYTES`` of JSON in all. Large data
belongs in step outputs (``steps.<id>``), which are stored once.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentflow.core.errors import ConfigError, StepFailure
from agentflow.core.payload_format import describe_kind, type_problem

StateType = Literal["string", "number", "boolean", "object", "array"]
VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MAX_VARIABLES = 100
MAX_STATE_BYTES = 64 * 1024
"""The most JSON (UTF-8 bytes) a run's variables may take together."""
MAX_DEPTH = 32
"""The deepest nesting of an ``object`` or ``array`` value (the value itself is depth 1)."""
_SURROGATE = re.compile("[\ud800-\udfff]")


class StateVariable(BaseModel):
    """One declared run variable.

    Attributes:
        type: ``string``, ``number``, ``boolean``, ``object`` or ``array``.
        description: what the variable means, for people.
        default: the value a run starts with when it is not given one (null: unset).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: StateType
    description: str | None = Field(default=None, max_length=2000)
    default: Any = None

    @model_validator(mode="after")
    def _default_fits(self) -> StateVariable:
        problem = value_problem(self.type, self.default)
        if problem:
            raise ValueError(f"the default {problem}")
        return self


def check_definition(definition: dict[str, StateVariable] | None) -> dict[str, StateVariable] | None:
    """Refuse variable names templates cannot read and defaults too large to store together.

    Raises:
        ValueError: naming the offending variable (pydantic reports it at ``state_definition``).
    """
    if not definition:
        return definition
    for name in definition:
        if not VARIABLE_NAME.match(name):
            raise ValueError(
                f"variable name {name[:80]!r} must start with a letter or _ and hold only letters,"
                " digits and _ (at most 64), so that {{ state.<name> }} can read it"
            )
    problem = size_problem({name: var.default for name, var in definition.items()})
    if problem:
        raise ValueError(f"the defaults {problem}")
    return definition


def value_problem(kind: StateType, value: Any) -> str | None:
    """Why ``value`` cannot be a ``kind`` variable, or None when it can (null always can)."""
    if value is None:
        return None
    if kind == "object":
        problem = None if isinstance(value, dict) else f"must be an object, not {describe_kind(value)}"
    elif kind == "array":
        problem = None if isinstance(value, list) else f"must be an array, not {describe_kind(value)}"
    elif kind == "number" and isinstance(value, float) and not math.isfinite(value):
        problem = f"must be a finite number, not {value}"
    else:
        problem = type_problem(kind, value)
    return problem or _storage_problem(value)


def size_problem(variables: dict[str, Any]) -> str | None:
    """Why ``variables`` are too large (or not encodable) to store, or None."""
    try:
        size = len(orjson.dumps(variables))
    except TypeError as exc:  # lone surrogates, integers beyond 64 bits
        return f"cannot be stored as JSON ({exc})"
    if size <= MAX_STATE_BYTES:
        return None
    largest = max(variables, key=lambda name: len(orjson.dumps(variables[name])))
    return (
        f"take {size} bytes as JSON, over the {MAX_STATE_BYTES} allowed for all variables"
        f" (the largest is {largest!r})"
    )


def start_errors(definition: dict[str, StateVariable] | None, given: Any) -> list[dict[str, str]]:
    """Every way a run's starting ``given`` state falls short of ``definition``.

    Returns:
        One ``{"path", "message"}`` per problem, e.g. ``state.attempts``; empty when it fits.
    """
    if given is None:
        return []
    if not isinstance(given, dict):
        return [{"path": "state", "message": f"the state must be a JSON object, not {describe_kind(given)}"}]
    declared = definition or {}
    errors = []
    for name, value in given.items():
        path = f"state.{name}"
        var = declared.get(name)
        if var is None:
            errors.append({"path": path, "message": _undeclared(declared)})
            continue
        problem = value_problem(var.type, value)
        if problem:
            errors.append({"path": path, "message": problem})
    if not errors and definition:
        problem = size_problem(initial_variables(definition, given))
        if problem:
            errors.append({"path": "state", "message": f"the variables {problem}"})
    return errors


def check_start_state(workflow: str, definition: dict[str, StateVariable] | None, given: Any) -> None:
    """Refuse a starting state that does not match the workflow's ``state_definition``.

    Raises:
        ConfigError: code ``state_invalid``; ``details['errors']`` lists each field.
    """
    problems = start_errors(definition, given)
    if not problems:
        return
    first = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    raise ConfigError(
        "state_invalid",
        f"the state does not match {workflow!r}'s state_definition at {first['path']}:"
        f" {first['message']}{more}",
        details={"errors": problems},
        solution="Send only the variables the workflow's state_definition declares, with their types.",
    )


def initial_variables(definition: dict[str, StateVariable], given: dict[str, Any] | None) -> dict[str, Any]:
    """Every declared variable: its given value, else its default, else null (``given`` is checked)."""
    given = given or {}
    # Copies: a default or a caller's value must not be shared with (and changed through) a run.
    return {name: copy.deepcopy(given.get(name, var.default)) for name, var in definition.items()}


def saved_variables(
    definition: dict[str, StateVariable] | None,
    variables: dict[str, Any],
    saves: dict[str, Any],
    node_id: str,
) -> dict[str, Any]:
    """The variables after node ``node_id`` saved ``saves`` (its rendered ``save_to_state``).

    Raises:
        StepFailure: code ``state_invalid``, not retryable: a value of the wrong type, or
            variables too large to store.
    """
    declared = definition or {}
    updated = dict(variables)
    for name, value in saves.items():
        var = declared.get(name)
        # Publishing refuses undeclared names; a run of an older version could still hold one.
        problem = _undeclared(declared) if var is None else value_problem(var.type, value)
        if problem:
            raise StepFailure(
                "state_invalid",
                f"node {node_id!r} cannot save to state.{name}: {problem}",
                retryable=False,
                details={"node": node_id, "variable": name, "type": var.type if var else None},
                solution=f"Make save_to_state.{name} render a {var.type if var else 'declared'} value"
                " (a filter such as | int or | string helps), or change its type in state_definition.",
            )
        updated[name] = value
    problem = size_problem(updated)
    if problem:
        raise StepFailure(
            "state_invalid",
            f"node {node_id!r} cannot save to state: the variables would {problem}",
            retryable=False,
            details={"node": node_id, "limit_bytes": MAX_STATE_BYTES},
            solution="Keep large data in step outputs (steps.<id>) and save only small values to state.",
        )
    return updated


def _undeclared(declared: dict[str, StateVariable]) -> str:
    if not declared:
        return "not declared: the workflow has no state_definition"
    names = sorted(declared)
    listed = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
    return f"not declared in state_definition (declared: {listed})"


def _storage_problem(value: Any) -> str | None:
    # Iterative, so a deeply nested value cannot exhaust the stack before it is refused.
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "contains the NUL character (\\u0000), which PostgreSQL cannot store"
            if _SURROGATE.search(item):
                return "contains a lone UTF-16 surrogate, which is not valid text"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return "contains NaN or Infinity, which JSON cannot hold"
        elif isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                return f"is nested deeper than {MAX_DEPTH} levels"
            if isinstance(item, dict):
                if not all(isinstance(key, str) for key in item):
                    return "has an object key that is not a string"
                stack.extend((key, depth) for key in item)
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, int) and not isinstance(item, bool):
            if not -(2**63) <= item < 2**64:
                return "holds an integer beyond 64 bits"
        elif item is not None and not isinstance(item, bool):
            return f"holds {type(item).__name__}, which is not JSON"
    return None
