"""``/api/people``: who requests can be for (issue 14): a handle, a name, an email address and
roles. A ``user_input`` node's ``assignees`` may name a role (``role:finance``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES, conflict
from agentflow.core.people import MAX_ROLES, ROLE

router = APIRouter(prefix="/api/people", tags=["requests"], responses={**ERROR_RESPONSES})


class Person(BaseModel):
    """Someone requests can be for."""

    model_config = ConfigDict(from_attributes=True)

    handle: str = Field(examples=["lee"])
    workspace_id: UUID
    name: str | None
    email: str | None = Field(description="Where the email channel mails them.")
    roles: list[str] = Field(examples=[["finance"]])
    created_at: datetime
    updated_at: datetime


class PersonList(BaseModel):
    """People by handle."""

    people: list[Person]


_PERSON_SCHEMA: dict[str, Any] = {
    "properties": {
        "name": {"type": ["string", "null"], "minLength": 1, "maxLength": 200},
        "email": {"type": ["string", "null"], "maxLength": 320, "format": "email"},
        "roles": {
            "type": "array",
            "items": {"type": "string", "pattern": ROLE.pattern},
            "maxItems": MAX_ROLES,
            "uniqueItems": True,
        },
    },
    "additionalProperties": False,
}
"""What the body may hold (validated by the engine, whose 422 ``person_invalid`` names each field)."""


@router.get("", response_model=PersonList, summary="List people")
async def list_people(
    engine: EngineDep,
    workspace: WorkspaceDep,
    role: Annotated[str | None, Query(max_length=64, description="Only those who hold this role.")] = None,
) -> PersonList:
    """Everyone (who holds ``role``), by handle."""
    found = await engine.people.list(role=role, workspace_id=workspace)
    return PersonList(people=[Person.model_validate(p) for p in found])


@router.get("/{handle}", response_model=Person, summary="Get a person")
async def get_person(handle: str, engine: EngineDep, workspace: WorkspaceDep) -> Person:
    """One person; 404 ``person_not_found``."""
    return Person.model_validate(await engine.people.get(handle, workspace_id=workspace))


@router.put("/{handle}", response_model=Person, summary="Set a person")
async def set_person(
    handle: str,
    engine: EngineDep,
    workspace: WorkspaceDep,
    fields: Annotated[
        dict[str, Any],
        Body(
            description="`name`, `email`, `roles` (what is left out is cleared).",
            examples=[{"name": "Lee", "email": "lee@example.com", "roles": ["finance"]}],
            json_schema_extra=_PERSON_SCHEMA,
        ),
    ],
) -> Person:
    """Create or replace a person; 422 ``person_invalid`` naming each wrong field."""
    return Person.model_validate(await engine.people.set(handle, fields, workspace_id=workspace))


@router.delete(
    "/{handle}",
    status_code=204,
    summary="Remove a person",
    responses=conflict("`resource_in_use` (workflows name them as an assignee; see `force`)"),
)
async def delete_person(
    handle: str,
    engine: EngineDep,
    workspace: WorkspaceDep,
    force: Annotated[bool, Query(description="Remove them even though workflows name them.")] = False,
) -> Response:
    """Remove a person (their past answers stay); 404 ``person_not_found``; 409
    ``resource_in_use`` while published workflows name them as an assignee, unless ``force=true``."""
    await engine.people.delete(handle, force=force, workspace_id=workspace)
    return Response(status_code=204)
