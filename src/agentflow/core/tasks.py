"""Tasks: what a change to a task may say, what it changes, and the event it publishes.

A task is what a run (or a person) asks a person to do. Every change to a task bumps its
``revision`` and publishes one event, ``task:<id>:<revision>``, that also reaches the run
that created the task (seed 000: "any change in a task's state triggers a re-evaluation of
the originating workflow run"). Deciding what a change does is pure and lives here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import fields
from datetime import datetime
from typing import Any, Literal, Self
from uuid import UUID

import orjson
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentflow.core.errors import ConfigError, ConflictError
from agentflow.core.frozen import frozen

TaskStatus = Literal["open", "in_progress", "completed", "canceled"]
TASK_STATUSES: tuple[str, ...] = ("open", "in_progress", "completed", "canceled")
EDITABLE = ("title", "description", "assignee", "due_at", "priority", "status", "metadata")
"""The fields a change may set, in the order changes list them."""
MAX_METADATA_BYTES = 64 * 1024
MAX_LIST = 500

_SURROGATE = re.compile("[\ud800-\udfff]")


@frozen
class TaskRecord:
    """A task as stored.

    Attributes:
        run_id: the run that created it (None for tasks made by people or integrations).
        origin_key: ``run_id:step_seq:n`` for tasks a step created (written exactly once).
        revision: how many changes it has had; its events are ``task:<id>:<revision>``.
        system_generated: True when a run created it.
    """

    workspace_id: UUID
    id: UUID
    run_id: UUID | None
    origin_key: str | None
    title: str
    description: str | None
    assignee: str | None
    due_at: datetime | None
    priority: str | None
    status: str
    system_generated: bool
    account_id: str | None
    metadata: dict[str, Any]
    expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    revision: int

    @classmethod
    def from_row(cls, row: Any) -> Self:
        """Build from a database row (a mapping); extra columns are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in dict(row).items() if k in names})

    def document(self) -> dict[str, Any]:
        """The task as JSON (ids and times as strings): what events and inboxes carry."""
        return {f.name: _json_value(getattr(self, f.name)) for f in fields(self) if f.name != "workspace_id"}


class TaskChange(BaseModel):
    """A change to a task: only the fields given change; ``null`` clears a clearable field.

    Attributes:
        title: a new title (cannot be cleared).
        description / assignee / due_at / priority: new values, or null to clear.
        status: ``open``, ``in_progress``, ``completed`` or ``canceled``.
        metadata: keys to merge into the task's metadata; a key set to null is removed.
        expected_revision: apply only if the task is still at this revision (else 409
            ``task_revision_conflict``): a client's read-modify-write cannot undo a change
            it did not see.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    title: str | None = Field(default=None, min_length=1, max_length=500)
    description: str | None = Field(default=None, max_length=20_000)
    assignee: str | None = Field(default=None, min_length=1, max_length=320)
    due_at: AwareDatetime | None = None
    priority: str | None = Field(default=None, min_length=1, max_length=50)
    status: TaskStatus | None = None
    metadata: dict[str, Any] | None = None
    expected_revision: int | None = Field(default=None, ge=0, le=2**31 - 1)

    @field_validator("title", "status", "metadata", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:  # only called for fields given: null means "clear", which these cannot
            raise ValueError("cannot be null")
        return value

    @field_validator("title", "description", "assignee", "priority")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        if value is not None and ("\x00" in value or _SURROGATE.search(value)):
            raise ValueError("contains a NUL character or a lone surrogate, which cannot be stored")
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        problem = None if value is None else _metadata_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @property
    def given(self) -> list[str]:
        """The editable fields this change sets, in ``EDITABLE`` order."""
        return [name for name in EDITABLE if name in self.model_fields_set]


class TaskQuery(BaseModel):
    """Which tasks to list: every filter given must hold.

    Attributes:
        run_id: created by this run.
        status / assignee / account_id: equal to this.
        due_before / due_after: due strictly before / after this time (tasks without a due
            date are left out when either is given).
        limit: at most this many (1-500).
        after: continue after this task (the previous page's last one).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: UUID | None = None
    status: TaskStatus | None = None
    assignee: str | None = Field(default=None, min_length=1, max_length=320)
    account_id: str | None = Field(default=None, min_length=1, max_length=200)
    due_before: AwareDatetime | None = None
    due_after: AwareDatetime | None = None
    limit: int = Field(default=100, ge=1, le=MAX_LIST)
    after: UUID | None = None


@frozen
class Applied:
    """What a change does to a task.

    Attributes:
        values: every editable field's value after the change.
        changes: ``{field: {"old": ..., "new": ...}}`` (JSON) for the fields that differ;
            empty for a change that changes nothing.
    """

    values: dict[str, Any]
    changes: dict[str, dict[str, Any]]


@frozen
class TaskUpdate:
    """The outcome of a change.

    Attributes:
        task: the task after it.
        changes: what changed (empty: nothing did, and nothing was published).
        topic / message_id: the event published, when something changed.
        delivered: True when the change reached the inbox of the run that created the task.
    """

    task: TaskRecord
    changes: dict[str, dict[str, Any]]
    topic: str | None = None
    message_id: str | None = None
    delivered: bool = False


def parse_change(change: TaskChange | Mapping[str, Any]) -> TaskChange:
    """Validate a change.

    Raises:
        ConfigError: ``task_invalid``, with each offending path in ``details.errors``.
    """
    if isinstance(change, TaskChange):
        return change
    try:
        return TaskChange.model_validate(dict(change))
    except ValidationError as exc:
        solution = f"A change may set {', '.join(EDITABLE)} and expected_revision; correct each listed path."
        raise _invalid("task_invalid", "the task change", exc, solution) from None


def parse_query(**filters: Any) -> TaskQuery:
    """Validate list filters.

    Raises:
        ConfigError: ``task_query_invalid``, with each offending filter in ``details.errors``.
    """
    try:
        return TaskQuery.model_validate(filters)
    except ValidationError as exc:
        raise _invalid("task_query_invalid", "the task filters", exc, "Correct each listed filter.") from None


def apply_change(current: Mapping[str, Any], change: TaskChange) -> Applied:
    """The task's editable fields after ``change``, and the difference from ``current``.

    Raises:
        ConflictError: ``task_revision_conflict`` when ``expected_revision`` is not the
            task's revision.
    """
    if change.expected_revision is not None and change.expected_revision != current["revision"]:
        raise ConflictError(
            "task_revision_conflict",
            f"the task is at revision {current['revision']}, not {change.expected_revision}",
            details={"revision": current["revision"]},
            solution="Read the task again, then apply your change to what it is now.",
        )
    values = {name: current[name] for name in EDITABLE}
    for name in change.given:
        new = getattr(change, name)
        if name == "metadata":
            merged = {**(current["metadata"] or {}), **new}
            new = {key: value for key, value in merged.items() if value is not None}
        values[name] = new
    changes = {
        name: {"old": _json_value(current[name]), "new": _json_value(values[name])}
        for name in EDITABLE
        if values[name] != current[name]
    }
    return Applied(values, changes)


def event_topic(changes: Mapping[str, Any]) -> str:
    """``task.completed`` / ``task.canceled`` when the status became that, else ``task.updated``."""
    new_status = changes.get("status", {}).get("new")
    return f"task.{new_status}" if new_status in ("completed", "canceled") else "task.updated"


def event_message_id(task_id: UUID, revision: int) -> str:
    """The id of the event of a task's ``revision``: one event per change, however often retried."""
    return f"task:{task_id}:{revision}"


def event_data(task: TaskRecord, changes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What a change event carries: the whole task, what changed, and the run that made it."""
    return {
        "task": task.document(),
        "changes": changes,
        "run_id": None if task.run_id is None else str(task.run_id),
        "account_id": task.account_id,
    }


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    return value


def _metadata_problem(metadata: dict[str, Any]) -> str | None:
    try:
        text = orjson.dumps(metadata)
    except TypeError as exc:  # lone surrogates, integers beyond 64 bits
        return f"cannot be stored as JSON ({exc})"
    if len(text) > MAX_METADATA_BYTES:
        return f"takes {len(text)} bytes as JSON, over the {MAX_METADATA_BYTES} allowed"
    if b"\\u0000" in text:
        return "contains the NUL character (\\u0000), which PostgreSQL cannot store"
    return None


def _invalid(code: str, what: str, exc: ValidationError, solution: str) -> ConfigError:
    errors = [
        {"path": ".".join(str(p) for p in e["loc"]) or "(root)", "message": e["msg"]}
        for e in exc.errors(include_url=False)
    ]
    return ConfigError(
        code,
        f"{what} is invalid at {errors[0]['path']}: {errors[0]['message']}",
        details={"errors": errors},
        solution=solution,
    )
