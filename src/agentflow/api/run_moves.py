"""``POST /api/ai/workflows/{workflow_id}/runs/migrate``: move parked runs to another version."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field

from agentflow.api.deps import EngineDep, WorkspaceDep, workflow_ref
from agentflow.api.schemas import ERROR_RESPONSES, MAX_VERSION
from agentflow.run_moves import MAX_RUNS

router = APIRouter(
    prefix="/api/ai/workflows/{workflow_id}/runs", tags=["runs"], responses={**ERROR_RESPONSES}
)


class Migrate(BaseModel):
    """Which parked runs to move, and where."""

    model_config = ConfigDict(extra="forbid")

    to_version: int | None = Field(default=None, ge=1, le=MAX_VERSION, description="Default: the latest.")
    from_version: int | None = Field(default=None, ge=1, le=MAX_VERSION, description="Only runs on it.")
    run_ids: list[UUID] | None = Field(
        default=None, min_length=1, max_length=MAX_RUNS, description="Only these."
    )
    dry_run: bool = Field(default=False, description="Say what would move, move nothing.")


class MovedRun(BaseModel):
    """A run that moved (or would)."""

    run_id: UUID
    from_version: int


class RefusedRun(BaseModel):
    """A run that stays, and why."""

    run_id: UUID
    from_version: int
    problems: list[str] = Field(examples=[["node 'approve', which it runs next, is not in this version"]])


class Migrated(BaseModel):
    """What a migration did."""

    to_version: int
    dry_run: bool
    moved: list[MovedRun]
    refused: list[RefusedRun]


@router.post("/migrate", response_model=Migrated, summary="Move parked runs to another version")
async def migrate_runs(
    workflow_id: str,
    body: Annotated[Migrate, Body()],
    engine: EngineDep,
    workspace: WorkspaceDep,
) -> Migrated:
    """Move the workflow's parked runs (created, waiting or suspended, held by no worker; at
    most 1,000 a call) to ``to_version``, each only where everything it waits in and will run
    next exists there, with its variables declared (``refused`` says why not). Loop items and
    agent nodes' runs follow their parent. 422 ``version_not_found``."""
    workflow = await engine.get_workflow(workflow_ref(workflow_id), workspace_id=workspace)
    done = await engine.run_moves.migrate(
        workflow, to_version=body.to_version, from_version=body.from_version,
        run_ids=body.run_ids, dry_run=body.dry_run,
    )  # fmt: skip
    return Migrated(
        to_version=done.to_version,
        dry_run=body.dry_run,
        moved=[MovedRun(run_id=run, from_version=version) for run, version in done.moved],
        refused=[
            RefusedRun(run_id=r.run_id, from_version=r.from_version, problems=r.problems)
            for r in done.refused
        ],
    )
