"""The parts of an agent workflow's config beyond its prompt: actions, tools, budgets, impact.

See docs/reference/agents.md. Everything here is validated data; the agent loop reads it.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentflow.core.credentials import NAME_PATTERN as CREDENTIAL_NAME_PATTERN
from agentflow.core.durations import parse_duration

TOOL_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
BUILTIN_TOOLS = ("generate_plan", "create_task", "send_notification", "wait", "complete")
"""The built-in tools; ``create_task``, ``send_notification`` and ``wait`` follow ``actions``."""
ACTION_TOOLS = {
    "create_tasks": "create_task",
    "send_notifications": "send_notification",
    "follow_ups": "wait",
}
"""Which entry of the ``actions`` map enables which built-in tool."""

DEFAULT_MINUTES = {
    "event_analysed": 5.0,
    "action_item": 2.0,
    "task_created": 3.0,
    "notification_sent": 2.0,
    "plan_generated": 15.0,
}
"""Estimated human minutes each agent action replaces (override per workflow in ``impact``)."""


def _duration(value: Any) -> timedelta | None:
    return None if value is None else parse_duration(value)


_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


class Action(BaseModel):
    """One entry of an agent workflow's ``actions`` map (``create_tasks``, ``send_notifications``,
    ``follow_ups``), e.g. ``{"enabled": true, "expiry": "7d"}``.

    Attributes:
        enabled: whether the model sees the action's tool.
        expiry: for ``create_tasks``: tasks expire this long after creation.
        channels: for ``send_notifications``: the channels allowed (default all).
        slack_webhook_url: for ``send_notifications``: the Slack incoming webhook to post to.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    enabled: bool = False
    expiry: timedelta | None = None
    channels: list[Literal["email", "slack", "in_app"]] | None = None
    slack_webhook_url: str | None = Field(default=None, max_length=2000)

    @field_validator("expiry", mode="before")
    @classmethod
    def _expiry(cls, value: Any) -> timedelta | None:
        return _duration(value)


class Budget(BaseModel):
    """Limits on one run; past any of them the run is suspended with a reason, never looping on.

    Attributes:
        max_model_calls: decisions (model calls) per run.
        max_tool_calls: tool calls per run, refused ones included.
        max_tokens: input plus output tokens per run.
        max_usd: model spend per run, in USD.
        max_wall_time: time since the run started.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_model_calls: int = Field(default=25, ge=1, le=10_000)
    max_tool_calls: int = Field(default=50, ge=1, le=100_000)
    max_tokens: int = Field(default=500_000, ge=1)
    max_usd: float = Field(default=5.0, gt=0)
    max_wall_time: timedelta = timedelta(days=30)

    @field_validator("max_wall_time", mode="before")
    @classmethod
    def _wall(cls, value: Any) -> timedelta:
        return parse_duration(value)


class HttpTool(BaseModel):
    """A tool the model calls as an HTTP request, through the guarded HTTP client.

    Attributes:
        name: the tool's name for the model.
        description: what it does, for the model.
        method: the HTTP method.
        url: the URL; ``{{ args.x }}`` and ``{{ run.id }}`` render in it.
        headers: extra headers (templates render).
        parameters: a JSON Schema object for the arguments (checked before every call).
        side_effecting: changes the world (default: any method but GET).
        require_approval: a person must approve each call (bound to its exact arguments).
        timeout: how long the call may take.
        credential: a stored credential (by name) the call carries; its secrets never reach
            the model or the step's record.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = Field(default="", max_length=4000)
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    url: str = Field(min_length=1, max_length=2000)
    headers: dict[str, str] = Field(default_factory=dict, max_length=50)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    side_effecting: bool | None = None
    require_approval: bool = False
    timeout: timedelta = timedelta(seconds=30)
    credential: str | None = Field(default=None, pattern=CREDENTIAL_NAME_PATTERN)

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: Any) -> timedelta:
        return parse_duration(value)

    @field_validator("parameters")
    @classmethod
    def _schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            jsonschema.Draft202012Validator.check_schema(value)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"parameters is not a valid JSON Schema: {exc.message}") from None
        if value.get("type") != "object":
            raise ValueError("parameters must be a JSON Schema with type 'object'")
        return value

    @property
    def changes_world(self) -> bool:
        """Whether calling it has side effects."""
        return self.side_effecting if self.side_effecting is not None else self.method != "GET"


class ApprovalPolicy(BaseModel):
    """How a workflow's tool approvals wait (``approvals`` names the tools).

    Attributes:
        timeout: how long a request waits for a person.
        on_timeout: ``reject`` (the model is told nobody approved, and decides) or ``fail``
            (the run fails with ``approval_expired``).
        notify: who is emailed when a request is made: addresses, or ``account_owner``.
        allow_edits: whether the approver may change the arguments (the edited call runs).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    timeout: timedelta = timedelta(days=7)
    on_timeout: Literal["reject", "fail"] = "reject"
    notify: list[str] = Field(default_factory=list, max_length=20)
    allow_edits: bool = True

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: Any) -> timedelta:
        found = parse_duration(value)
        if not timedelta(seconds=1) <= found <= timedelta(days=365):
            raise ValueError("approval timeout must be between 1s and 365d")
        return found

    @field_validator("notify")
    @classmethod
    def _notify(cls, value: list[str]) -> list[str]:
        bad = [v for v in value if v != "account_owner" and not _EMAIL.match(v)]
        if bad:
            raise ValueError(f"notify takes email addresses or 'account_owner', not {bad}")
        return value


class Impact(BaseModel):
    """How the impact report values the agent's work.

    Attributes:
        minutes: human minutes each action replaces, by action (``event_analysed``,
            ``action_item``, ``task_created``, ``notification_sent``, ``plan_generated``);
            missing ones take ``DEFAULT_MINUTES``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    minutes: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known(self) -> Impact:
        unknown = sorted(set(self.minutes) - set(DEFAULT_MINUTES))
        if unknown:
            raise ValueError(f"unknown impact action(s) {unknown}; known: {sorted(DEFAULT_MINUTES)}")
        if any(v < 0 for v in self.minutes.values()):
            raise ValueError("minutes cannot be negative")
        return self

    def minutes_for(self, action: str) -> float:
        """Minutes one ``action`` is worth."""
        return self.minutes.get(action, DEFAULT_MINUTES[action])


class ContextLimits(BaseModel):
    """How much history the model sees verbatim; older steps are summarised (all stay stored).

    Attributes:
        recent_steps: the latest steps shown in full.
        max_chars: a cap on the whole context, in characters (about 4 per token).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    recent_steps: int = Field(default=12, ge=2, le=200)
    max_chars: int = Field(default=48_000, ge=2_000, le=2_000_000)
