"""``/api/tasks``: list, read, change and complete tasks.

Every change publishes one event (``task.updated``, ``task.completed`` or ``task.canceled``,
message id ``task:<id>:<revision>``) and reaches the inbox of the run that created the task.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body, Query
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES, conflict
from agentflow.core.tasks import MAX_LIST, TASK_STATUSES, TaskStatus, TaskUpdate

router = APIRouter(prefix="/api/tasks", tags=["tasks"], responses={**ERROR_RESPONSES})


class Task(BaseModel):
    """A task: what a run (or a person) asks a person to do."""

    model_config = ConfigDict(from_attributes=True)

    id: UUID
    workspace_id: UUID
    run_id: UUID | None = Field(description="The run that created it; its changes reach that run's inbox.")
    origin_key: str | None
    title: str
    description: str | None
    assignee: str | None
    due_at: datetime | None
    priority: str | None
    status: str = Field(examples=["open"])
    system_generated: bool
    account_id: str | None
    metadata: dict[str, Any]
    expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    revision: int = Field(description="How many changes it has had.")


class TaskList(BaseModel):
    """Tasks, oldest first; pass ``next_after`` as ``after`` for the next page."""

    tasks: list[Task]
    next_after: UUID | None


class ChangeEvent(BaseModel):
    """The event a change published into the event log."""

    topic: str = Field(examples=["task.completed"])
    message_id: str = Field(examples=["task:0b9e…:3"])


class TaskChanged(BaseModel):
    """The task after a change, what changed (``{field: {old, new}}``), and the event published
    (null, with no changes, when the change changed nothing)."""

    task: Task
    changes: dict[str, dict[str, Any]]
    event: ChangeEvent | None
    delivered_to_run: bool = Field(
        description="The change reached the inbox of the run that created the task."
    )


_TEXT = {"type": ["string", "null"], "minLength": 1}
_CHANGE_SCHEMA: dict[str, Any] = {
    "properties": {
        "title": {"type": "string", "minLength": 1, "maxLength": 500},
        "description": {"type": ["string", "null"], "maxLength": 20_000},
        "assignee": {**_TEXT, "maxLength": 320},
        "due_at": {"type": ["string", "null"], "format": "date-time"},
        "priority": {**_TEXT, "maxLength": 50},
        "status": {"enum": list(TASK_STATUSES)},
        "metadata": {"type": "object", "additionalProperties": True},
        "expected_revision": {"type": ["integer", "null"], "minimum": 0, "maximum": 2**31 - 1},
    },
    "additionalProperties": False,
}
"""What the body may hold (validated by the engine, whose 422 ``task_invalid`` names each field)."""

_CHANGE_EXAMPLE = {"status": "in_progress", "assignee": "ada@example.com", "metadata": {"crm_id": "T-17"}}


@router.get("", response_model=TaskList, summary="List tasks")
async def list_tasks(
    engine: EngineDep,
    workspace: WorkspaceDep,
    run_id: Annotated[UUID | None, Query(description="Only tasks this run created.")] = None,
    status: Annotated[TaskStatus | None, Query(description="Only tasks with this status.")] = None,
    assignee: Annotated[str | None, Query(min_length=1, max_length=320)] = None,
    account_id: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    due_before: Annotated[AwareDatetime | None, Query(description="Due strictly before this time.")] = None,
    due_after: Annotated[AwareDatetime | None, Query(description="Due strictly after this time.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST, description="At most this many tasks.")] = 100,
    after: Annotated[
        UUID | None, Query(description="Continue after this task (the previous page's `next_after`).")
    ] = None,
) -> TaskList:
    """Tasks matching every filter given, oldest first, one page at a time."""
    records = await engine.tasks.list(
        run_id=run_id, status=status, assignee=assignee, account_id=account_id, due_before=due_before,
        due_after=due_after, limit=limit, after=after, workspace_id=workspace,
    )  # fmt: skip
    next_after = records[-1].id if len(records) == limit else None
    return TaskList(tasks=[Task.model_validate(r) for r in records], next_after=next_after)


@router.get("/{task_id}", response_model=Task, summary="Get a task")
async def get_task(task_id: str, engine: EngineDep, workspace: WorkspaceDep) -> Task:
    """A task by id; 404 ``task_not_found`` for an unknown, malformed or foreign id."""
    return Task.model_validate(await engine.tasks.get(task_id, workspace_id=workspace))


@router.patch(
    "/{task_id}",
    response_model=TaskChanged,
    summary="Change a task",
    responses=conflict("`task_revision_conflict`"),
)
async def update_task(
    task_id: str,
    engine: EngineDep,
    workspace: WorkspaceDep,
    change: Annotated[
        dict[str, Any],
        Body(
            description="The fields to change: `title`, `description`, `assignee`, `due_at` (ISO 8601"
            " with a time zone), `priority`, `status` (`open`, `in_progress`, `completed`, `canceled`),"
            " `metadata` (merged; a key set to null is removed); null clears a field that may be empty."
            " `expected_revision` applies the change only at that revision (else 409"
            " `task_revision_conflict`). 422 `task_invalid` lists each offending field.",
            examples=[_CHANGE_EXAMPLE],
            json_schema_extra=_CHANGE_SCHEMA,
        ),
    ],
) -> TaskChanged:
    """Change a task in one transaction: bump its revision, publish the change event, and
    deliver it to the inbox of the run that created the task. A change that changes nothing
    publishes nothing."""
    return _changed(await engine.tasks.update(task_id, change, workspace_id=workspace))


@router.post("/{task_id}/complete", response_model=TaskChanged, summary="Complete a task")
async def complete_task(task_id: str, engine: EngineDep, workspace: WorkspaceDep) -> TaskChanged:
    """Mark a task completed (event ``task.completed``); completing it again changes nothing."""
    return _changed(await engine.tasks.complete(task_id, workspace_id=workspace))


def _changed(update: TaskUpdate) -> TaskChanged:
    event = None
    if update.topic is not None and update.message_id is not None:
        event = ChangeEvent(topic=update.topic, message_id=update.message_id)
    return TaskChanged(
        task=Task.model_validate(update.task),
        changes=update.changes,
        event=event,
        delivered_to_run=update.delivered,
    )
