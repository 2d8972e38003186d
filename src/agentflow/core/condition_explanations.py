"""Why a trigger or branch condition matched or not (``agentflow.core.conditions``): every node
evaluated, no short-circuit, each rule with what its path held, for the dispatcher's decision
record and a ``condition`` node's step.
"""

from __future__ import annotations

import math
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal

from agentflow.core import condition_ops as ops
from agentflow.core.conditions import AllOf, Condition, Not, Rule, check_now
from agentflow.core.frozen import frozen


@frozen
class Explanation:
    """Why a condition matched or not, for the dispatcher's decision record.

    Attributes:
        matched: the result of this node.
        kind: ``rule``, ``all``, ``any`` or ``not``.
        children: the explanations of a group's (or negation's) conditions, all evaluated.
        path: a rule's path.
        op: a rule's operator.
        value: a rule's configured value.
        present: whether the rule's path resolved to something.
        actual: the resolved value, made JSON-safe and truncated.
        reason: a short sentence, e.g. ``the field is absent``.
    """

    matched: bool
    kind: Literal["rule", "all", "any", "not"]
    children: tuple[Explanation, ...] = ()
    path: str | None = None
    op: str | None = None
    value: Any = None
    present: bool = False
    actual: Any = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """A JSON object: ``{"matched", "all": [...]}`` for groups, the rule's facts for rules."""
        if self.kind == "not":
            return {"matched": self.matched, "not": self.children[0].to_json()}
        if self.kind != "rule":
            return {"matched": self.matched, self.kind: [child.to_json() for child in self.children]}
        out: dict[str, Any] = {"matched": self.matched, "path": self.path, "op": self.op}
        if ops.operator(self.op or "")[0].prepare is not None:
            out["value"] = json_safe(self.value)
        out["present"] = self.present
        if self.present:
            out["actual"] = self.actual
        out["reason"] = self.reason
        return out


def explain(condition: Condition, document: Any, *, now: datetime) -> Explanation:
    """Evaluate every node (no short-circuit) and say why; ``matched`` equals ``evaluate``.

    Raises:
        ValueError: ``now`` is naive.
    """
    check_now(now)
    return _explain(condition, document, now)


def _explain(condition: Condition, document: Any, now: datetime) -> Explanation:
    if isinstance(condition, Rule):
        matched, actual, reason = condition.outcome(document, now)
        present = actual is not ops.ABSENT
        return Explanation(
            matched, "rule", path=condition.path, op=condition.op, value=condition.value,
            present=present, actual=json_safe(actual) if present else None, reason=reason,
        )  # fmt: skip
    if isinstance(condition, Not):
        inner = _explain(condition.condition, document, now)
        return Explanation(not inner.matched, "not", (inner,))
    children = tuple(
        _explain(child, document, now)
        for child in (condition.all if isinstance(condition, AllOf) else condition.any)
    )
    if isinstance(condition, AllOf):
        return Explanation(all(c.matched for c in children), "all", children)
    return Explanation(any(c.matched for c in children), "any", children)


def json_safe(value: Any, depth: int = 0) -> Any:
    """A JSON-serialisable, bounded copy of a value (long text and big containers truncated)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**63 else str(value)
    if isinstance(value, Decimal):
        return float(value) if value.is_finite() else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):  # lone surrogates (from json.loads) cannot be encoded
        text = value if len(value) <= 500 else value[:500] + "…"
        return text.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, datetime | date):
        return value.isoformat()
    if depth >= 4 and isinstance(value, list | tuple | dict):
        return f"<{ops.kind_of(value)} of {len(value)}>"
    if isinstance(value, list | tuple):
        return [json_safe(item, depth + 1) for item in value[:20]] + (["…"] if len(value) > 20 else [])
    if isinstance(value, dict):  # sorted, so an explanation does not depend on key order either
        items = sorted(((_key_text(k), v) for k, v in value.items()), key=lambda kv: kv[0])[:20]
        return {key: json_safe(item, depth + 1) for key, item in items}
    return f"<{type(value).__name__}>"


def _key_text(key: Any) -> str:
    return str(key) if isinstance(key, str | int | float | bool | None) else f"<{type(key).__name__}>"
