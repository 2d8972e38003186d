"""Resource references and the life of a workflow (issue 15, seed 004): "which workflows use
this?" (``engine.resources``), and disabling, archiving or deleting a workflow, refused while
other workflows use it unless forced.

Credentials and people check their own deletions the same way (``store.references``).
"""

from __future__ import annotations

from uuid import UUID

from agentflow.core.errors import NotFoundError
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.records import WorkflowRecord
from agentflow.core.references import ResourceKind
from agentflow.store import references, workflows
from agentflow.store.database import Database
from agentflow.store.references import Reference


class Resources:
    """Lookups of references, and workflow changes that check them."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def references(
        self, kind: ResourceKind, name: str, *, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> list[Reference]:
        """The versions that use resource ``name`` of ``kind`` and can still act: the latest of
        each workflow that is not archived, and any with active runs."""
        return await references.users(self.db.pool, workspace_id, f"{kind}:{name}")

    async def set_flags(
        self,
        workflow: WorkflowRecord,
        *,
        draft: bool | None = None,
        enabled: bool | None = None,
        archived: bool | None = None,
        force: bool = False,
    ) -> WorkflowRecord:
        """Change a workflow's flags. Taking it out of service (disable, draft, archive) is
        refused while other workflows start it, unless ``force``.

        Raises:
            ConflictError: ``resource_in_use`` (with the workflows that use it), or
                ``workflow_archived`` (enabling an archived workflow without unarchiving it).
        """
        stays_archived = workflow.archived_at is not None and archived is not False
        if enabled and stays_archived:
            raise workflows.archived(workflow.name)
        if enabled is False or draft or archived:
            await references.refuse_if_used(
                self.db.pool, workflow.workspace_id, _refs_to(workflow),
                doing=f"take workflow {workflow.name!r} out of service", force=force,
                ignore_workflow=workflow.id,
            )  # fmt: skip
        updated = await workflows.set_flags(
            self.db.pool, workflow.workspace_id, workflow.id, draft=draft, enabled=enabled, archived=archived
        )
        if updated is None:
            raise NotFoundError("workflow_not_found", f"workflow {workflow.name!r} was deleted meanwhile")
        return updated

    async def delete_workflow(self, workflow: WorkflowRecord, *, force: bool = False) -> None:
        """Delete a workflow with its versions, finished runs, triggers and schedules.

        Args:
            force: delete it even though other workflows start it (their steps then fail
                with ``child_workflow_not_found``). Active runs always refuse.

        Raises:
            ConflictError: ``resource_in_use``, or ``workflow_has_active_runs``.
        """
        await references.refuse_if_used(
            self.db.pool, workflow.workspace_id, _refs_to(workflow),
            doing=f"delete workflow {workflow.name!r}", force=force, ignore_workflow=workflow.id,
        )  # fmt: skip
        if not await workflows.delete(self.db.pool, workflow.workspace_id, workflow.id):
            raise NotFoundError("workflow_not_found", f"workflow {workflow.name!r} was deleted meanwhile")


def _refs_to(workflow: WorkflowRecord) -> list[str]:
    """How other versions name ``workflow``: as a workflow, and as an employee if it is one."""
    refs = [f"workflow:{workflow.name}"]
    if workflow.kind == "employee":
        refs.append(f"employee:{workflow.name}")
    return refs
