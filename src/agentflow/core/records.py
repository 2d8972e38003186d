"""Plain records of what is stored: workflows, versions, runs and steps."""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime
from decimal import Decimal
from typing import Any, Self
from uuid import UUID

from agentflow.core.frozen import frozen
from agentflow.core.statuses import RunStatus


class _FromRow:
    @classmethod
    def from_row(cls, row: Any) -> Self:
        """Build from a database row (a mapping); extra columns are ignored."""
        values = dict(row)
        return cls(**{name: values[name] for name in _field_names(cls) if name in values})


_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    # Read once per record type: ``fields()`` walks the class each time (building records was
    # the largest item of a start's CPU in the client; without the walk, 15-19 % less).
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


@frozen
class WorkflowRecord(_FromRow):
    """A workflow: a name, a kind and the number of its newest version."""

    workspace_id: UUID
    id: UUID
    name: str
    kind: str
    latest_version: int
    draft: bool
    enabled: bool
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None = None  # archived: disabled, out of the default list, started by nothing


@frozen
class VersionRecord(_FromRow):
    """An immutable config snapshot of a workflow."""

    workspace_id: UUID
    workflow_id: UUID
    version: int
    config: dict[str, Any]
    content_hash: str
    created_at: datetime


@frozen
class RunRecord(_FromRow):
    """A run as stored; see docs/concepts.md for each field."""

    workspace_id: UUID
    id: UUID
    workflow_id: UUID
    workflow_version: int
    status: RunStatus
    status_reason: str | None
    enrollment_key: str | None
    input: Any
    state: dict[str, Any]
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
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    usd_cost: Decimal
    created_at: datetime
    started_at: datetime | None
    updated_at: datetime
    completed_at: datetime | None
    canceled_at: datetime | None
    trigger: dict[str, Any] | None = None  # what started it: source, event(s); see docs/triggers.md
    account_id: str | None = None  # the account the run is about (from its event by default)
    costs: list[dict[str, Any]] | None = None  # per-model tokens and USD (seed 002 costs[])
    parent_step: int | None = None  # a loop item: the parent's step that started the loop
    item_index: int | None = None  # a loop item: its place in the loop's list
    caller_node: str | None = None  # a run_workflow's child: the parent's node that started it
    trace_parent: str | None = None  # W3C traceparent of the span that started it (runtime.tracing)
    conversation: dict[str, Any] | None = None  # what it answers: {id, channel, title} (seed 002)
    rerun_of: dict[str, Any] | None = None  # a rerun: {run_id, step} it was made from (core.reruns)
    # Read with run lists only (joined, not stored on the run): seed 002's columns.
    employee_id: UUID | None = None  # the workflow, when it is an employee
    parent_workflow: str | None = None  # the name of the parent run's workflow

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", RunStatus(self.status))

    @property
    def duration_ms(self) -> float | None:
        """From its first claim to its end, in milliseconds (None until it has ended)."""
        ended = self.completed_at or self.canceled_at
        if ended is None or self.started_at is None:
            return None
        return (ended - self.started_at).total_seconds() * 1000


@frozen
class StepRecord(_FromRow):
    """One attempt of one step: the run's progress and audit log."""

    id: int
    run_id: UUID
    seq: int
    attempt: int
    node_id: str | None
    kind: str
    name: str | None
    status: str
    input: Any
    output: Any
    error: dict[str, Any] | None
    idempotency_key: str
    worker: str | None
    fencing_token: int
    started_at: datetime
    finished_at: datetime
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    usd_cost: Decimal
    model: str | None = None

    @property
    def duration_ms(self) -> float:
        """How long the attempt ran, in milliseconds."""
        return (self.finished_at - self.started_at).total_seconds() * 1000
