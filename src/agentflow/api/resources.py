"""``/api/resources/{kind}/{name}/references``: which workflows use a resource (seed 004).

Answered from each published version's recorded references (``core.references``): the latest
version of every workflow that is not archived, and older versions that active runs are on.
"""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field

from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES
from agentflow.core.references import ResourceKind

router = APIRouter(prefix="/api/resources", tags=["resources"], responses={**ERROR_RESPONSES})


class ResourceUse(BaseModel):
    """A workflow version that uses the resource."""

    workflow_id: UUID
    workflow: str = Field(examples=["refunds"])
    version: int
    latest: bool = Field(description="Whether it is the workflow's latest version.")
    enabled: bool = Field(description="Whether the workflow is enabled (not a draft, not archived).")
    active_runs: int = Field(description="Runs of this version that have not ended.")


class ResourceReferences(BaseModel):
    """Who uses a resource."""

    kind: ResourceKind
    name: str
    references: list[ResourceUse]


@router.get(
    "/{kind}/{name}/references",
    response_model=ResourceReferences,
    summary="Which workflows use a resource",
)
async def references(
    kind: ResourceKind,
    name: Annotated[str, Path(min_length=1, max_length=200)],
    engine: EngineDep,
    workspace: WorkspaceDep,
) -> ResourceReferences:
    """The versions that use a credential, workflow, employee, tool, person or role (``role``
    names the role: ``finance``) and can still act. A resource nothing uses has an empty list
    (whether it exists is not checked: a workflow may name one before it is created)."""
    found = await engine.resources.references(kind, name, workspace_id=workspace)
    return ResourceReferences(kind=kind, name=name, references=[ResourceUse(**r.to_json()) for r in found])
