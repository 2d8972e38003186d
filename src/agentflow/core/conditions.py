"""Trigger conditions: a safe, declarative test of an event document (issue 3, seed 004).

A condition is a rule ``{"path": "data.account.tier", "op": "equals", "value": "gold"}``,
a group ``{"all": [...]}`` or ``{"any": [...]}``, or a negation ``{"not": ...}``; a plain
list means ``all``. Nothing is ever evaluated as code. The dispatcher re-checks conditions
on every event against the latest document, so the order in which fields arrive does not
matter: the result depends only on the document's content (and ``now``).

Example:
    >>> cond = parse_conditions([{"path": "severity", "op": "gte", "value": 3}])
    >>> evaluate(cond, {"severity": 4}, now=datetime.now(UTC))
    True
"""

from __future__ import annotations

import math
from datetime import date, datetime
from decimal import Decimal
from typing import Any, TypeAlias

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from agentflow.core import condition_ops as ops
from agentflow.core.errors import ConfigError
from agentflow.core.json_paths import parse_path, resolve

MAX_DEPTH = 16
MAX_RULES = 200
_MAX_VALUE_DEPTH = 32
_FROZEN = ConfigDict(extra="forbid", frozen=True)


class Rule(BaseModel):
    """A test of one field: ``{"path": ..., "op": ..., "value": ...}``.

    Attributes:
        path: where the field is, e.g. ``data.account.tier`` or ``items[0].sku``.
        op: the operator's canonical name (aliases such as ``eq`` or ``in`` are accepted).
        value: what to compare with; omitted for ``exists``, ``is_empty`` and their negations.
        case_insensitive: fold case for the string operators.
    """

    model_config = _FROZEN
    path: str = Field(min_length=1, max_length=500)
    op: str
    value: Any = None
    case_insensitive: bool = Field(default=False, strict=True)
    _operand: Any = PrivateAttr(default=None)

    @field_validator("path")
    @classmethod
    def _path(cls, path: str) -> str:
        parse_path(path)
        return path

    @field_validator("op", mode="before")
    @classmethod
    def _op(cls, name: Any) -> str:
        op = ops.canonical(name) if isinstance(name, str) else None
        if op is None:
            raise ValueError(f"unknown operator {name!r}; known operators: {', '.join(ops.KNOWN)}")
        return op

    @field_validator("value", mode="before")
    @classmethod
    def _value(cls, value: Any) -> Any:
        return _json_value(value, 0)

    @field_validator("case_insensitive")
    @classmethod
    def _fold(cls, fold: bool, info: ValidationInfo) -> bool:
        op = info.data.get("op")
        if fold and op is not None and not ops.operator(op)[0].folds:
            folding = sorted(n for n in ops.KNOWN if ops.operator(n)[0].folds)
            raise ValueError(f"case_insensitive applies only to {', '.join(folding)}")
        return fold

    @model_validator(mode="after")
    def _prepare(self) -> Rule:
        spec = ops.operator(self.op)[0]
        given = "value" in self.model_fields_set
        if spec.prepare is None:
            if given:
                raise ValueError(f"{self.op} takes no value; remove 'value'")
        elif not given:
            raise ValueError(f"{self.op} needs a value")
        else:
            try:
                self._operand = spec.prepare(self.value, self.case_insensitive)
            except ValueError as exc:
                raise ValueError(f"{self.op} {exc}") from None
        return self

    def prepared_operand(self) -> Any:
        """The value as the operator compares with it (prepared once, when parsed)."""
        return self._operand

    def outcome(self, document: Any, now: datetime) -> tuple[bool, Any, str]:
        """Test the document: (matched, the resolved field or ``ABSENT``, why)."""
        actual = resolve(document, self.path)
        matched, reason = ops.run(self.op, actual, self._operand, self.case_insensitive, now)
        return matched, actual, reason


class AllOf(BaseModel):
    """Matches when every condition matches (an empty ``all`` always matches)."""

    model_config = _FROZEN
    all: tuple[Condition, ...]


class AnyOf(BaseModel):
    """Matches when at least one condition matches."""

    model_config = _FROZEN
    any: tuple[Condition, ...] = Field(min_length=1)


class Not(BaseModel):
    """Matches when its condition does not; written ``{"not": {...}}``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    condition: Condition = Field(alias="not")


Condition: TypeAlias = Rule | AllOf | AnyOf | Not
for _model in (AllOf, AnyOf, Not):
    _model.model_rebuild()


def _json_value(value: Any, depth: int) -> Any:
    if depth > _MAX_VALUE_DEPTH:
        raise ValueError(f"value nests deeper than {_MAX_VALUE_DEPTH} levels")
    if isinstance(value, datetime | date):  # YAML turns 2024-05-01 into a date
        return value.isoformat()
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError("value must be a finite number")
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("value must be a finite number")
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, list | tuple):
        return [_json_value(item, depth + 1) for item in value]
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {key: _json_value(item, depth + 1) for key, item in value.items()}
    raise ValueError(
        f"value must be JSON (text, number, boolean, null, list or mapping), not {ops.kind_of(value)}"
    )


# ---- parsing with paths people can act on -------------------------------------------------


class _TooMany(Exception):
    pass


class _Parser:
    def __init__(self, root: str) -> None:
        self.root = root
        self.errors: list[dict[str, str]] = []
        self.rules = 0

    def error(self, path: str, message: str) -> None:
        self.errors.append({"path": path, "message": message})

    def node(self, raw: Any, path: str, depth: int) -> Condition | None:
        if depth > MAX_DEPTH:
            self.error(path, f"conditions nest more than {MAX_DEPTH} levels deep; flatten them")
            return None
        if not isinstance(raw, dict):
            self.error(path, "a condition must be a mapping: {path, op, value} or {all|any|not: ...}")
            return None
        groups = [key for key in ("all", "any", "not") if key in raw]
        if groups and len(raw) != 1:
            self.error(path, f"a group has exactly one key, 'all', 'any' or 'not'; found {sorted(raw)}")
            return None
        if not groups and "path" not in raw and "op" not in raw:
            self.error(path, f"expected {{path, op, value}} or a group all/any/not; found keys {sorted(raw)}")
            return None
        if groups == ["not"]:
            inner = self.node(raw["not"], f"{path}.not", depth + 1)
            return None if inner is None else Not(condition=inner)
        if groups:
            return self.group(groups[0], raw[groups[0]], f"{path}.{groups[0]}", depth)
        return self.rule(raw, path)

    def group(self, key: str, items: Any, path: str, depth: int) -> Condition | None:
        if not isinstance(items, list):
            self.error(path, f"'{key}' needs a list of conditions")
            return None
        if key == "any" and not items:
            self.error(path, "'any' needs at least one condition")
            return None
        children = [self.node(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(items)]
        valid = [child for child in children if child is not None]
        if len(valid) != len(children):
            return None
        return AllOf(all=tuple(valid)) if key == "all" else AnyOf(any=tuple(valid))

    def rule(self, raw: dict[str, Any], path: str) -> Rule | None:
        self.rules += 1
        if self.rules > MAX_RULES:
            self.error(self.root, f"more than {MAX_RULES} rules; simplify the conditions")
            raise _TooMany
        try:
            return Rule.model_validate(raw)
        except ValidationError as exc:
            for err in exc.errors(include_url=False):
                field = ".".join(str(part) for part in err["loc"]) or "value"
                message = err["msg"].removeprefix("Value error, ")
                if err["type"] == "extra_forbidden":
                    message = "unknown key; a rule has path, op, value and case_insensitive"
                self.error(f"{path}.{field}", message)
            return None


def check_conditions(data: Any, path: str = "conditions") -> tuple[Condition | None, list[dict[str, str]]]:
    """Parse conditions, collecting every problem instead of raising.

    Args:
        data: a condition mapping, or a list of them meaning ``all``.
        path: where ``data`` sits in its config, prefixed to every error path.

    Returns:
        The condition (None if there were errors) and the errors, each
        ``{"path": "conditions.all[2].op", "message": ...}``.
    """
    parser = _Parser(path)
    try:
        node = parser.group("all", data, path, 0) if isinstance(data, list) else parser.node(data, path, 1)
    except _TooMany:
        node = None
    return (node if not parser.errors else None), parser.errors


def checked(path: str) -> AfterValidator:
    """A validator for a config field that holds a condition: refuses one that does not parse,
    naming each problem by its path below ``path`` (``when.all[0].op: ...``)."""

    def check(value: Any) -> Any:
        if value is not None:
            _parsed, errors = check_conditions(value, path)
            if errors:
                raise ValueError("; ".join(f"{e['path']}: {e['message']}" for e in errors))
        return value

    return AfterValidator(check)


def parse_conditions(data: Any, path: str = "conditions") -> Condition:
    """Parse and validate conditions (see ``check_conditions``).

    Raises:
        ConfigError: code ``conditions_invalid``; ``details['errors']`` lists each
            ``{"path", "message"}``.
    """
    condition, errors = check_conditions(data, path)
    if condition is None:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(
            "conditions_invalid",
            f"{first['path']}: {first['message']}{more}",
            details={"errors": errors},
            solution="Correct each listed path; see docs/reference/conditions.md.",
        )
    return condition


def dump_conditions(condition: Condition) -> dict[str, Any]:
    """The normalised JSON form of a condition; ``parse_conditions`` reads it back."""
    return condition.model_dump(mode="json", by_alias=True, exclude_unset=True)


# ---- evaluation --------------------------------------------------------------------------


def evaluate(condition: Condition, document: Any, *, now: datetime) -> bool:
    """Whether ``document`` satisfies ``condition``. Never raises on unusual data.

    Args:
        condition: from ``parse_conditions``.
        document: the JSON document (e.g. an event) the paths point into.
        now: the current time (timezone-aware), for ``older_than`` and ``newer_than``.

    Raises:
        ValueError: ``now`` is naive.
    """
    check_now(now)
    return _evaluate(condition, document, now)


def _evaluate(condition: Condition, document: Any, now: datetime) -> bool:
    if isinstance(condition, Rule):
        return condition.outcome(document, now)[0]
    if isinstance(condition, AllOf):
        return all(_evaluate(child, document, now) for child in condition.all)
    if isinstance(condition, AnyOf):
        return any(_evaluate(child, document, now) for child in condition.any)
    return not _evaluate(condition.condition, document, now)


def check_now(now: datetime) -> None:
    """Refuse a naive ``now`` (``older_than`` and ``newer_than`` compare aware times)."""
    if now.utcoffset() is None:
        raise ValueError("now must be timezone-aware, e.g. datetime.now(UTC)")
