"""An agent run's state between steps, its budgets, and which tools its model may call.

An agent run alternates two phases. ``decide``: one step builds the context and asks the model,
whose tool calls become ``pending``. ``act``: one step per pending call executes it. When no call
is left the run decides again. The state document stores where the run is and what it has
spent; the conversation itself is rebuilt from the steps (``run_steps``), which keep everything.
These functions only read and return values.
"""

from __future__ import annotations

import hashlib
from dataclasses import field, replace
from typing import Any

import orjson

from agentflow.core.agent_config import ACTION_TOOLS, Budget
from agentflow.core.chat import ToolCall, Usage
from agentflow.core.definitions import AgentConfig
from agentflow.core.frozen import frozen
from agentflow.core.identity_memo import IdentityMemo

DECIDE = "decide"
ACT = "act"
ALLOWANCE_KEYS = ("model_calls", "tool_calls", "tokens", "usd", "wall_seconds")
WALL_TIME_BREACH = "budget_wall_seconds"
"""The code of a breach of ``budget.max_wall_time``."""


@frozen
class AgentState:
    """Where an agent run is and what it has used.

    Attributes:
        phase: ``decide`` or ``act``.
        pending: the tool calls still to execute, in the model's order.
        plan: the current plan (from ``generate_plan``), stored on the run.
        model_calls / tool_calls / tokens / usd: what the run has used so far.
        allowance: extra budget granted when a person resumed a suspended run.
        approval: the approval request the next call waits for (``id``, ``call_id``, ``hash``).
        nudges: answers in a row with text and no tool call (each told to use the tools).
        refused: tool calls in a row that were refused (unknown, bad arguments, failed).
        invalid_outputs: ``complete`` calls whose ``data`` broke the workflow's output_schema.
        child: the child run the next call waits for (``call_id``, ``run_id``, ``seq``: the
            step that started it), a ``run_workflow`` node attached to the agent.
    """

    phase: str = DECIDE
    pending: tuple[ToolCall, ...] = ()
    plan: dict[str, Any] | None = None
    model_calls: int = 0
    tool_calls: int = 0
    tokens: int = 0
    usd: float = 0.0
    allowance: dict[str, float] = field(default_factory=dict)
    approval: dict[str, Any] | None = None
    nudges: int = 0
    refused: int = 0
    invalid_outputs: int = 0
    child: dict[str, Any] | None = None

    @property
    def decides_next(self) -> bool:
        """Whether the run's next step is a decision (not a call one asked for)."""
        return not (self.phase == ACT and self.pending)

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> AgentState:
        """Read a stored state document (an empty one is a new run)."""
        doc = doc or {}
        agent = doc.get("agent") if isinstance(doc.get("agent"), dict) else {}
        assert isinstance(agent, dict)
        return cls(
            phase=str(agent.get("phase", DECIDE)),
            pending=tuple(ToolCall.from_json(c) for c in agent.get("pending", []) if isinstance(c, dict)),
            plan=agent.get("plan") if isinstance(agent.get("plan"), dict) else None,
            model_calls=int(agent.get("model_calls", 0)),
            tool_calls=int(agent.get("tool_calls", 0)),
            tokens=int(agent.get("tokens", 0)),
            usd=float(agent.get("usd", 0.0)),
            allowance={k: float(v) for k, v in (agent.get("allowance") or {}).items() if k in ALLOWANCE_KEYS},
            approval=agent.get("approval") if isinstance(agent.get("approval"), dict) else None,
            nudges=int(agent.get("nudges", 0)),
            refused=int(agent.get("refused", 0)),
            invalid_outputs=int(agent.get("invalid_outputs", 0)),
            child=agent.get("child") if isinstance(agent.get("child"), dict) else None,
        )

    def to_json(self) -> dict[str, Any]:
        """The state document (``{"agent": {...}}``)."""
        doc: dict[str, Any] = {
            "phase": self.phase,
            "pending": [c.to_json() for c in self.pending],
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "tokens": self.tokens,
            "usd": round(self.usd, 6),
        }
        if self.plan is not None:
            doc["plan"] = self.plan
        if self.allowance:
            doc["allowance"] = self.allowance
        if self.approval is not None:
            doc["approval"] = self.approval
        if self.nudges:
            doc["nudges"] = self.nudges
        if self.refused:
            doc["refused"] = self.refused
        if self.invalid_outputs:
            doc["invalid_outputs"] = self.invalid_outputs
        if self.child is not None:
            doc["child"] = self.child
        return {"agent": doc}

    def after_decision(self, calls: tuple[ToolCall, ...], usage: Usage, usd: float) -> AgentState:
        """The state after a model call that asked for ``calls``."""
        return replace(
            self,
            phase=ACT if calls else DECIDE,
            pending=calls,
            model_calls=self.model_calls + 1,
            tokens=self.tokens + usage.total_tokens,
            usd=self.usd + usd,
            nudges=0 if calls else self.nudges,
        )

    def after_nudge(self) -> AgentState:
        """The state after an answer without a tool call that the model is told about."""
        return replace(self, nudges=self.nudges + 1)

    def after_call(self, *, plan: dict[str, Any] | None = None, refused: bool = False) -> AgentState:
        """The state after the first pending call was executed (or ``refused``)."""
        rest = self.pending[1:]
        return replace(
            self,
            phase=ACT if rest else DECIDE,
            pending=rest,
            tool_calls=self.tool_calls + 1,
            plan=plan if plan is not None else self.plan,
            approval=None,
            child=None,
            refused=self.refused + 1 if refused else 0,
        )

    def with_allowance(self, extra: dict[str, float]) -> AgentState:
        """The state with ``extra`` budget added to what earlier resumes granted."""
        merged = dict(self.allowance)
        for key, value in extra.items():
            merged[key] = merged.get(key, 0.0) + value
        return replace(self, allowance=merged)


@frozen
class Breach:
    """A budget the run has used up: why it is suspended, in words a person can act on."""

    code: str
    message: str
    solution: str
    details: dict[str, Any]


def check_budget(budget: Budget, state: AgentState, elapsed_seconds: float, *, before: str) -> Breach | None:
    """The first budget the run cannot go past before its next ``model`` call or ``tool`` call."""
    extra = state.allowance
    limits: list[tuple[str, float, float, str]] = [
        ("tokens", state.tokens, budget.max_tokens + extra.get("tokens", 0), "budget.max_tokens"),
        ("usd", state.usd, budget.max_usd + extra.get("usd", 0), "budget.max_usd"),
        (
            "wall_seconds",
            elapsed_seconds,
            budget.max_wall_time.total_seconds() + extra.get("wall_seconds", 0),
            "budget.max_wall_time",
        ),
    ]
    if before == "model":
        limit = budget.max_model_calls + extra.get("model_calls", 0)
        limits.insert(0, ("model_calls", state.model_calls, limit, "budget.max_model_calls"))
    else:
        limit = budget.max_tool_calls + extra.get("tool_calls", 0)
        limits.insert(0, ("tool_calls", state.tool_calls, limit, "budget.max_tool_calls"))
    for name, used, limit, setting in limits:
        if used >= limit:
            return Breach(
                f"budget_{name}",
                f"the run has used {_figure(name, used)} of its {_figure(name, limit)} "
                f"{name.replace('_', ' ')} budget, so it was suspended instead of going on",
                f"Look at what the run did; to let it go on, resume it with more {name} "
                f"(agentflow runs resume RUN --add-{name.replace('_', '-')} N), or raise {setting}.",
                {"budget": name, "used": used, "limit": limit},
            )
    return None


WorkspaceSpend = tuple[float, int, float | None, int | None]
"""A workspace's model spend today (USD, tokens) and its own daily limits (None: the default)."""


def check_workspace_budget(
    used_usd: float, used_tokens: int, limit_usd: float | None, limit_tokens: int | None
) -> Breach | None:
    """Whether the workspace's model spend today (UTC) has reached its daily limit."""
    if limit_usd and used_usd >= limit_usd:
        return Breach(
            "budget_workspace_usd",
            f"the workspace has spent ${used_usd:.4f} of its ${limit_usd:.2f} daily model budget today (UTC)",
            "Wait for tomorrow (UTC), or raise the workspace's daily budget (agentflow budget set --usd N), "
            "then resume the run.",
            {"budget": "workspace_usd", "used": used_usd, "limit": limit_usd},
        )
    if limit_tokens and used_tokens >= limit_tokens:
        return Breach(
            "budget_workspace_tokens",
            f"the workspace has used {used_tokens:,} of its {limit_tokens:,} daily tokens today (UTC)",
            "Wait for tomorrow (UTC), or raise the workspace's daily budget "
            "(agentflow budget set --tokens N), then resume the run.",
            {"budget": "workspace_tokens", "used": used_tokens, "limit": limit_tokens},
        )
    return None


def _figure(name: str, value: float) -> str:
    if name == "usd":
        return f"${value:.4f}"
    if name == "wall_seconds":
        return f"{value:,.0f}s"
    return f"{int(value):,}"


def enabled_builtins(config: AgentConfig) -> list[str]:
    """The built-in tools the model sees: ``generate_plan`` and ``complete`` always, the others
    when their ``actions`` entry is enabled."""
    return list(_tool_names(config)[0])


def allowed_tools(config: AgentConfig) -> list[str]:
    """Every tool name the model may call in this workflow (its allow-list)."""
    return list(_tool_names(config)[1])


def _names_of(config: AgentConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    builtins = (
        "generate_plan",
        *(t for a, t in ACTION_TOOLS.items() if config.action(a).enabled),
        "complete",
    )
    allowed = (
        *builtins,
        *config.tools,
        *(t.name for t in config.http_tools),
        *(n.id for n in config.node_tools),
    )
    return builtins, allowed


_tool_names = IdentityMemo(_names_of)
"""A config's built-in and allowed tool names: asked at every decision and act (about 6 µs
each time when worked out)."""


def needs_approval(config: AgentConfig, tool: str) -> bool:
    """Whether a person must approve each call of ``tool`` before it runs."""
    if tool in config.approvals:
        return True
    return any(t.name == tool and t.require_approval for t in config.http_tools)


def arguments_hash(tool: str, arguments: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a call: an approval applies to exactly these arguments."""
    canonical = orjson.dumps({"tool": tool, "arguments": arguments}, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()
