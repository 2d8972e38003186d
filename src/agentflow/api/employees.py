"""``/api/employees``: the workspace's AI teammates (issue 12, seed 002 ``employee`` workflows):
list them, and talk to one. A message starts a run of the employee with ``{message,
conversation_id}`` as its input; follow it with ``GET /api/runs/{id}/stream``, and declare
``memory`` keyed on ``{{ payload.conversation_id }}`` for the employee to remember the talk."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field

from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES, Workflow
from agentflow.core.errors import NotFoundError

router = APIRouter(prefix="/api/employees", tags=["agents"], responses={**ERROR_RESPONSES})


class EmployeeList(BaseModel):
    """The workflows of kind ``employee``, by name."""

    employees: list[Workflow]


class EmployeeMessage(BaseModel):
    """What a person says to an employee."""

    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=20_000, examples=["Draft the renewal email for Acme."])
    conversation_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Go on with this conversation (default: a new one).",
    )


class EmployeeReply(BaseModel):
    """The run that answers, and where to follow it."""

    run_id: uuid.UUID
    conversation_id: str
    stream: str = Field(description="The run's event stream.")


@router.get("", response_model=EmployeeList, summary="List employees")
async def list_employees(engine: EngineDep, workspace: WorkspaceDep) -> EmployeeList:
    """Every workflow of kind employee, by name."""
    found = await engine.list_workflows(workspace_id=workspace)
    return EmployeeList(employees=[Workflow.model_validate(w) for w in found if w.kind == "employee"])


@router.post("/{name}/messages", response_model=EmployeeReply, status_code=202, summary="Message an employee")
async def message_employee(
    name: str, engine: EngineDep, workspace: WorkspaceDep, body: Annotated[EmployeeMessage, Body()]
) -> EmployeeReply:
    """Start the employee's run that answers ``message``; 404 ``employee_not_found``."""
    workflow = await engine.get_workflow(name, workspace_id=workspace)
    if workflow.kind != "employee":
        raise NotFoundError(
            "employee_not_found", f"{name[:80]!r} is a workflow of kind {workflow.kind}, not an employee"
        )
    conversation = body.conversation_id or str(uuid.uuid4())
    payload = {"message": body.message, "conversation_id": conversation}
    started = await engine.start_run_once(
        workflow.id, payload, conversation={"id": conversation, "channel": "api"}, workspace_id=workspace
    )
    run = started.run
    return EmployeeReply(run_id=run.id, conversation_id=conversation, stream=f"/api/runs/{run.id}/stream")
