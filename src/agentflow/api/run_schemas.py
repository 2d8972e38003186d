"""The run as the API shows it (``Run``): its record, and the columns of seed 002's run list
computed from it (model, trigger id and URL, debounce key, the conversation's fields)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, computed_field

from agentflow.core.statuses import RunStatus
from agentflow.runtime import tracing


class Run(BaseModel):
    """A run: its status, input, output or error, position, lease and usage."""

    model_config = ConfigDict(from_attributes=True)

    id: UUID
    workspace_id: UUID
    workflow_id: UUID
    workflow_version: int
    status: RunStatus
    status_reason: str | None
    enrollment_key: str | None
    input: Any
    state: dict[str, Any] = Field(
        description="Where the run is (``node``: the next node) and its variables (``vars``), when the"
        " workflow declares a ``state_definition``.",
        examples=[{"node": "notify", "vars": {"attempts": 1, "approved": True}}],
    )
    output: Any
    error: dict[str, Any] | None
    step_seq: int
    attempt: int
    rescues: int
    due_at: datetime | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    fencing_token: int
    cancel_requested: bool
    parent_run_id: UUID | None
    parent_step: int | None = Field(
        default=None, description="A loop item: the parent's step that started the loop."
    )
    item_index: int | None = Field(default=None, description="A loop item: its place in the loop's list.")
    caller_node: str | None = Field(
        default=None,
        description="A run another started (run_workflow): the node of ``parent_run_id`` that did.",
    )

    @computed_field(  # type: ignore[prop-decorator]
        description="A loop item: the activation of the parent's loop node (``run_id:step``)."
    )
    @property
    def parent_activation_id(self) -> str | None:
        """The loop activation a loop item belongs to (seed 001 ``node_runs``)."""
        if self.parent_run_id is None or self.parent_step is None:
            return None
        return f"{self.parent_run_id}:{self.parent_step}"

    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    usd_cost: Decimal
    created_at: datetime
    started_at: datetime | None
    updated_at: datetime
    completed_at: datetime | None
    canceled_at: datetime | None
    duration_ms: float | None = Field(
        default=None, description="From its first claim to its end (null until then)."
    )
    trigger: dict[str, Any] | None = Field(
        default=None,
        description="What started the run: `source` (event, public, private, schedule) and the"
        " `event` (with `debounced.events` when a debounce window started it); null for manual runs.",
    )
    account_id: str | None = Field(default=None, description="The account the run is about.")
    rerun_of: dict[str, Any] | None = Field(
        default=None,
        description="A rerun: the run (`run_id`) and the `step` it was made from; its steps before that"
        " one are copies of that run's.",
    )
    conversation: dict[str, Any] | None = Field(
        default=None, description="The conversation the run answers: `id`, `channel`, `title`."
    )
    costs: list[dict[str, Any]] | None = Field(
        default=None,
        description="Model use per model (`key_type`): input, output and cached input tokens, USD, calls.",
    )
    employee_id: UUID | None = Field(
        default=None, description="In run lists: the workflow's id when it is an employee (seed 002)."
    )
    parent_workflow: str | None = Field(
        default=None, description="In run lists: the name of the parent run's workflow (seed 002)."
    )
    trace_parent: str | None = Field(
        default=None,
        description="The W3C `traceparent` of the span that started the run (a request's, a parent"
        " run's); null when it started outside any trace.",
    )

    @computed_field(  # type: ignore[prop-decorator]
        description="The model the run called most (`provider:model`, from `costs`); null when none."
    )
    @property
    def model(self) -> str | None:
        """Seed 002's run list column: the run's main model."""
        calls = [(c.get("calls") or 0, c.get("key_type")) for c in self.costs or () if c.get("key_type")]
        return max(calls, key=lambda c: c[0])[1] if calls else None

    @computed_field(  # type: ignore[prop-decorator]
        description="What triggered it: the event's `message_id` (the last one of a debounce window)"
        " or the schedule's fire time; null for runs started through the API."
    )
    @property
    def trigger_id(self) -> str | None:
        """Seed 002's run list column: the trigger's own id."""
        trigger = self.trigger or {}
        event = trigger.get("event") if isinstance(trigger.get("event"), dict) else None
        if event is not None and event.get("message_id") is not None:
            return str(event["message_id"])
        fire = trigger.get("scheduled_at")
        return None if fire is None else str(fire)

    @computed_field(  # type: ignore[prop-decorator]
        description="The webhook URL path that started it (public or private triggers); null otherwise."
    )
    @property
    def trigger_url(self) -> str | None:
        """Seed 002's run list column: the webhook the run came through."""
        source = (self.trigger or {}).get("source")
        if source == "public":
            return f"/api/public/trigger/{self.workflow_id}"
        if source == "private":
            return f"/api/private/trigger/{self.workflow_id}"
        return None

    @computed_field(  # type: ignore[prop-decorator]
        description="The debounce window's key, when a debounce window started the run."
    )
    @property
    def debounce_key(self) -> str | None:
        """Seed 002's run list column."""
        debounced = (self.trigger or {}).get("debounced")
        return str(debounced["key"]) if isinstance(debounced, dict) and "key" in debounced else None

    @computed_field(description="`conversation.id`, flat (seed 002).")  # type: ignore[prop-decorator]
    @property
    def conversation_id(self) -> str | None:
        """Seed 002's run list column."""
        return (self.conversation or {}).get("id")

    @computed_field(description="`conversation.channel`, flat (seed 002).")  # type: ignore[prop-decorator]
    @property
    def conversation_channel(self) -> str | None:
        """Seed 002's run list column."""
        return (self.conversation or {}).get("channel")

    @computed_field(description="`conversation.title`, flat (seed 002).")  # type: ignore[prop-decorator]
    @property
    def conversation_title(self) -> str | None:
        """Seed 002's run list column."""
        return (self.conversation or {}).get("title")

    @computed_field(  # type: ignore[prop-decorator]
        description="The trace id (32 hex digits) of the run's spans, when traces are exported"
        " (`AGENTFLOW_TRACES`): the caller's trace, else one of the run's own."
    )
    @property
    def trace_id(self) -> str:
        """The trace id of the run's spans."""
        return f"{tracing.trace_id_of(self.id, self.trace_parent):032x}"
