"""The ``user_input`` node: a person in the loop (seed 001 HUMAN_IN_THE_LOOP, seed 002
``user_input``).

The node asks once: its step writes a request (a row bound to the run and the step) and the
run waits durably, holding no worker. The first valid answer, or the request's timeout,
reaches the run through its inbox; the node runs again, reads it, and fires the port of the
outcome: ``approved`` / ``rejected`` (approval, review), ``result`` (input, selection) or
``timeout`` (``timeout_action: continue``).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentflow.core.durations import parse_duration
from agentflow.core.graph.action_nodes import rendered_url_problem
from agentflow.core.graph.model_nodes import MODEL_PATTERN
from agentflow.core.graph.schema_paths import checked_object_schema
from agentflow.core.node_specs import ANY, ERROR_PORT, Duration, NodeSpec, register_node_spec
from agentflow.core.templating import has_templates

APPROVED, REJECTED, TIMEOUT = "approved", "rejected", "timeout"
DEFAULT_TIMEOUT = timedelta(days=7)
MAX_TIMEOUT = timedelta(days=365)
Channel = Literal["in_app", "email", "webhook", "slack"]
CHANNELS: tuple[Channel, ...] = ("in_app",)
"""Where a request goes by default: the console's inbox. ``email`` also mails each assignee
that is an email address a link that answers it; ``webhook`` POSTs the request, with a token
that answers it, to the node's ``webhook`` URL; ``slack`` posts it to the node's ``slack``
incoming webhook with buttons that answer it."""

_DECISION_KINDS = ("approval", "review")


class Option(BaseModel):
    """One choice of a ``selection``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    value: str | int | float | bool = Field(description="What the node sends when it is chosen.")
    label: str | None = Field(default=None, max_length=500, description="What the person sees.")


SLACK_CHANNEL = re.compile(r"[#@]?[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
"""A Slack channel by name (``#approvals``) or id (``C0123ABC``), as chat.postMessage takes it."""


def is_slack_channel(value: str) -> bool:
    """Whether ``value`` names a Slack channel (for the bot) rather than a webhook URL."""
    return SLACK_CHANNEL.fullmatch(value.strip()) is not None


class UserInputNode(NodeSpec):
    """Ask a person: approve, fill in a form, pick an option, or review a proposed value; the
    run waits durably for the first answer or the timeout."""

    title: ClassVar[str] = "Ask a person"
    literal_fields: ClassVar[frozenset[str]] = frozenset({"form", "options", "channels", "timeout_action"})
    type: Literal["user_input"] = "user_input"
    interaction: Literal["approval", "input", "selection", "review"] = Field(
        default="approval", description="What the person does."
    )
    message: str = Field(
        min_length=1, max_length=20_000, description="What the person is shown (a template)."
    )
    form: dict[str, Any] | None = Field(
        default=None, description="input: JSON Schema (type object) of the answer."
    )
    options: list[Option] | None = Field(
        default=None, min_length=1, max_length=100, description="selection: the choices."
    )
    proposed: Any = Field(
        default=None, description="review: the value to approve, edit or reject (templated)."
    )
    assignees: list[str] = Field(
        default_factory=list, max_length=50, description="Who may answer (templates); empty: anyone."
    )
    channels: list[Channel] = Field(
        default_factory=lambda: list(CHANNELS),
        min_length=1,
        description="Where the request is delivered: in_app (the inbox), email (a link to each assignee"
        " that is an email address), webhook (a POST to 'webhook'), slack (buttons, to 'slack').",
    )
    slack: str | None = Field(
        default=None,
        max_length=2_000,
        description="slack channel: a Slack incoming webhook URL, or a channel (#approvals, C0123) the"
        " server's Slack bot posts to (replies in its thread are read by the model).",
    )
    webhook: str | None = Field(
        default=None,
        max_length=2_000,
        description="webhook channel: the http(s) URL the request is POSTed to.",
    )
    wait: Duration = Field(default=DEFAULT_TIMEOUT, description="How long to wait for an answer.")
    timeout_action: Literal["fail", "continue", "default_response"] = Field(
        default="fail", description="fail the node, go on down 'timeout', or answer with default_response."
    )
    default_response: Any = Field(default=None, description="The answer taken at the timeout.")
    model: str | None = Field(
        default=None,
        pattern=MODEL_PATTERN,
        description="provider:model that reads free-text replies to the request's email"
        " (default: AGENTFLOW_MODEL, else scripted).",
    )

    @field_validator("wait", mode="before")
    @classmethod
    def _wait(cls, value: Any) -> timedelta:
        found = parse_duration(value)
        if not timedelta(seconds=1) <= found <= MAX_TIMEOUT:
            raise ValueError("wait must be between 1s and 365d")
        return found

    @field_validator("form")
    @classmethod
    def _form(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return checked_object_schema(value, "form")

    @model_validator(mode="after")
    def _fits_interaction(self) -> UserInputNode:
        kind = self.interaction
        if (kind == "input") != (self.form is not None):
            raise ValueError("'form' goes with interaction 'input', which needs it")
        if (kind == "selection") != (self.options is not None):
            raise ValueError("'options' goes with interaction 'selection', which needs it")
        if kind != "review" and self.proposed is not None:
            raise ValueError("'proposed' goes with interaction 'review'")
        if (self.timeout_action == "default_response") != (self.default_response is not None):
            raise ValueError("'default_response' goes with timeout_action 'default_response', which needs it")
        for channel, url in (("webhook", self.webhook), ("slack", self.slack)):
            if (channel in self.channels) != (url is not None):
                raise ValueError(f"'{channel}' goes with the {channel} channel, which needs it")
            bot = channel == "slack" and url is not None and is_slack_channel(url)
            problem = None if url is None or bot or has_templates(url) else rendered_url_problem(url.strip())
            if problem is not None:
                raise ValueError(f"'{channel}': {problem}")
        return self

    def references(self) -> set[str]:
        """The assignees that name people (``lee``) or roles (``role:finance``) of the
        workspace's directory; an email address or a template names none."""
        return {
            a if a.startswith("role:") else f"person:{a}"
            for a in self.assignees
            if "{{" not in a and "@" not in a
        }

    def output_ports(self) -> tuple[str, ...]:
        """Approvals and reviews: ``approved``/``rejected``; the others ``result``; ``timeout``
        when the timeout continues; ``error``."""
        ports = (APPROVED, REJECTED) if self.interaction in _DECISION_KINDS else ("result",)
        if self.timeout_action == "continue":
            ports = (*ports, TIMEOUT)
        return (*ports, ERROR_PORT)

    def declared_schema(self, port: str) -> dict[str, Any]:
        """What every outcome sends: who answered, when, how, and the answer."""
        response: dict[str, Any] = ANY
        if port == "result" and self.form is not None:
            response = self.form
        return {
            "type": "object",
            "properties": {
                "request_id": {"type": "string"},
                "outcome": {"type": "string"},
                "response": response,
                "reason": {"type": ["string", "null"]},
                "responded_by": {"type": ["string", "null"]},
                "responded_via": {"type": ["string", "null"]},
                "responded_at": {"type": ["string", "null"]},
            },
            "additionalProperties": False,
        }

    def request_spec(self) -> dict[str, Any] | None:
        """What the answer is checked against: the form or the options."""
        if self.form is not None:
            return {"form": self.form}
        if self.options is not None:
            return {"options": [o.model_dump(exclude_none=True) for o in self.options]}
        return None

    def port_of(self, outcome: str) -> str:
        """The port an outcome (``approved``, ``rejected``, ``answered``, ``timeout``) fires."""
        if outcome in (APPROVED, REJECTED, TIMEOUT):
            return outcome
        return APPROVED if self.interaction in _DECISION_KINDS else "result"


register_node_spec(UserInputNode)
