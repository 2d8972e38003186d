"""What a step sees while it runs, and the engine writes it asks for."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from agentflow.core.frozen import frozen


@frozen
class TaskDraft:
    """A task a step asks to create; written inside the step's checkpoint, exactly once."""

    title: str
    description: str | None = None
    assignee: str | None = None
    due_at: datetime | None = None
    priority: str | None = None
    account_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepContext:
    """Passed to a tool that declares a ``ctx: StepContext`` parameter.

    Attributes:
        workspace_id: the run's workspace.
        run_id: the run.
        workflow_id: the run's workflow.
        step_seq: the step's position in the run (0, 1, ...).
        attempt: 1 for the first attempt of this step, then 2, 3, ...
        fencing_token: the lease token this worker holds; pass it on to systems that can
            reject writes from stale holders.
        payload: the run's input.
    """

    workspace_id: UUID
    run_id: UUID
    workflow_id: UUID
    step_seq: int
    attempt: int
    fencing_token: int
    payload: dict[str, Any]
    tasks: list[TaskDraft] = field(default_factory=list)

    @property
    def idempotency_key(self) -> str:
        """``run_id:step_seq``: the same on every attempt of this step; send it with
        external calls so the receiver can drop repeats."""
        return f"{self.run_id}:{self.step_seq}"

    def create_task(self, title: str, **fields: Any) -> None:
        """Ask for a task to be created when this step checkpoints (exactly once)."""
        self.tasks.append(TaskDraft(title=title, **fields))
