"""``POST /api/ai/workflows/{workflow_id}/runs/migrate``: move parked runs to another version;
``POST .../runs/{run_id}/rerun``: a new run from where an ended one stood at a chosen step."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field

from agentflow.api.deps import EngineDep, WorkspaceDep, workflow_ref
from agentflow.api.run_schemas import Run
from agentflow.api.runs import run_of
from agentflow.api.schemas import ERROR_RESPONSES, MAX_VERSION, conflict
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


class Rerun(BaseModel):
    """Where a rerun starts, and on which version."""

    model_config = ConfigDict(extra="forbid")

    from_step: int = Field(
        ge=1, le=2_000_000_000, description="The step (its `seq`) to run again from; 0 is the start."
    )
    version: int | None = Field(
        default=None, ge=1, le=MAX_VERSION, description="Default: the version the run was on."
    )


@router.post(
    "/{run_id}/rerun",
    response_model=Run,
    status_code=201,
    summary="Rerun an ended run from a step",
    responses=conflict("`run_not_ended`, `run_is_a_child`, `rerun_not_possible`"),
)
async def rerun_run(
    workflow_id: str, run_id: str, body: Annotated[Rerun, Body()], engine: EngineDep, workspace: WorkspaceDep
) -> Run:
    """A new run that starts where this ended run stood when step ``from_step`` began: the
    steps that had completed by then are copied into it, not done again; the rest runs again
    (``version``: on another version, where everything the run would run next exists). The
    new run names this one in ``rerun_of``. 404 ``step_not_found``; 409 ``run_not_ended``,
    ``run_is_a_child`` (rerun the parent), ``rerun_not_possible`` (``details.problems``: a
    loop was running then, or the version lacks what the run needs)."""
    run = await run_of(engine, workspace, workflow_id, run_id)
    return Run.model_validate(
        await engine.rerun(run.id, body.from_step, version=body.version, workspace_id=workspace)
    )
