"""Run search: the filters a run list takes, read from query parameters and checked.

Seed 002's run list filters by exact fields, by run variables (``state[key]=value``) and by
ranges in bracket syntax (``started[gte]=...``). Every parameter is known or refused: a filter
a client misspelt must never be silently ignored (that lists every run as if it matched).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from agentflow.core.errors import ConfigError
from agentflow.core.frozen import frozen
from agentflow.core.statuses import RunStatus

MAX_LIMIT = 500
RANGE_OPS = {"gte": ">=", "lte": "<=", "gt": ">", "lt": "<"}
TRIGGER_SOURCES = ("event", "public", "private", "schedule", "manual")
_BRACKET = re.compile(r"^(?P<name>[a-z_]+)\[(?P<key>[^\[\]]{1,100})\]$")


@frozen
class Range:
    """``field op value``: ``op`` one of ``RANGE_OPS``."""

    field: str
    op: str
    value: Any


@frozen
class RunFilter:
    """What a run list asks for (every given filter must hold)."""

    exact: dict[str, Any] = field(default_factory=dict)
    state: dict[str, str] = field(default_factory=dict)
    ranges: tuple[Range, ...] = ()
    loop_of: UUID | None = None
    limit: int = 50
    before: UUID | None = None
    exclude_state: bool = False


def _uuid(name: str, text: str) -> UUID:
    try:
        return UUID(text)
    except ValueError:
        raise _invalid(name, text, "a run or workflow id (UUID)") from None


def _int(name: str, text: str, low: int, high: int) -> int:
    if not re.fullmatch(r"\d{1,9}", text) or not low <= int(text) <= high:
        raise _invalid(name, text, f"a whole number from {low} to {high}")
    return int(text)


def _time(name: str, text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise _invalid(
            name, text, "an ISO 8601 time with its offset, e.g. 2026-11-25T10:00:00+00:00"
        ) from None
    if moment.tzinfo is None:
        raise _invalid(name, text, "a time with its offset (+00:00 or Z)")
    return moment


def _number(name: str, text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise _invalid(name, text, "a number") from None
    if not value.is_finite():
        raise _invalid(name, text, "a finite number")
    return value


_EXACT_TEXT = ("enrollment_key", "account_id", "model", "employee", "conversation_id", "channel")
_RANGE_PARSERS = {"started": _time, "ended": _time, "created": _time, "duration": _number, "tokens": _number,
                  "usd": _number}  # fmt: skip


def parse_run_filter(params: Iterable[tuple[str, str]], *, with_workflow: bool = True) -> RunFilter:
    """The filter ``params`` (a query string's pairs) ask for.

    ``with_workflow``: ``workflow_id`` may be given (a workspace-wide list); a workflow's own
    list has it in its path.

    Raises:
        ConfigError: ``query_parameter_unknown`` naming a parameter the list does not take,
            ``query_parameter_invalid`` naming one whose value is malformed or repeated.
    """
    exact: dict[str, Any] = {}
    state: dict[str, str] = {}
    ranges: list[Range] = []
    options: dict[str, Any] = {}
    seen: set[str] = set()
    for name, value in params:
        if name in seen:
            raise _invalid(name, value, "one value (the parameter is given twice)")
        seen.add(name)
        bracket = _BRACKET.match(name)
        if bracket is not None and bracket["name"] == "state":
            state[bracket["key"]] = value
        elif bracket is not None and bracket["name"] in _RANGE_PARSERS and bracket["key"] in RANGE_OPS:
            parsed = _RANGE_PARSERS[bracket["name"]](name, value)
            ranges.append(Range(bracket["name"], bracket["key"], parsed))
        elif name == "status":
            if value not in {s.value for s in RunStatus}:
                raise _invalid(name, value, "one of " + ", ".join(s.value for s in RunStatus))
            exact[name] = value
        elif name in ("run_id", "parent_run_id") or (name == "workflow_id" and with_workflow):
            exact[name] = _uuid(name, value)
        elif name in ("employee_id", "ai_employee_id"):  # seed 002 calls it ai_employee_id
            exact["employee_id"] = _uuid(name, value)
        elif name == "trigger_id":
            if len(value) > 500:
                raise _invalid(name, value, "at most 500 characters")
            exact[name] = value
        elif name == "version":
            exact[name] = _int(name, value, 1, 2_000_000_000)
        elif name == "trigger":
            if value not in TRIGGER_SOURCES:
                raise _invalid(name, value, "one of " + ", ".join(TRIGGER_SOURCES))
            exact[name] = value
        elif name in _EXACT_TEXT:
            exact[name] = value
        elif name == "loop_of":
            options["loop_of"] = _uuid(name, value)
        elif name == "before":
            options["before"] = _uuid(name, value)
        elif name == "limit":
            options["limit"] = _int(name, value, 1, MAX_LIMIT)
        elif name == "exclude":
            parts = {part.strip() for part in value.split(",") if part.strip()}
            if not parts <= {"state", "steps"}:
                raise _invalid(name, value, "a list of: state, steps")
            options["exclude_state"] = "state" in parts
        else:
            raise _unknown(name, with_workflow)
    return RunFilter(exact, state, tuple(ranges), **options)


def _invalid(name: str, value: str, expected: str) -> ConfigError:
    return ConfigError(
        "query_parameter_invalid",
        f"query parameter {name!r} must be {expected}, not {value[:100]!r}",
        details={"parameter": name},
        solution=f"Send {name} as {expected}.",
    )


def _unknown(name: str, with_workflow: bool) -> ConfigError:
    known = [
        "status", "run_id", "version", "trigger", "trigger_id", "enrollment_key", "account_id", "model",
        "employee", "employee_id", "conversation_id", "channel", "parent_run_id", "loop_of",
        "state[key]", *(f"{r}[gte|lte|gt|lt]" for r in _RANGE_PARSERS), "limit", "before", "exclude",
    ]  # fmt: skip
    if with_workflow:
        known.insert(1, "workflow_id")
    return ConfigError(
        "query_parameter_unknown",
        f"run lists take no query parameter {name[:100]!r}",
        details={"parameter": name, "known": known},
        solution="Use one of: " + ", ".join(known) + ".",
    )
