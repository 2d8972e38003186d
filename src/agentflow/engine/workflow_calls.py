"""The engine's workflow methods: publish, look up, flag and delete workflows (``Engine``)."""

from __future__ import annotations

from uuid import UUID

from agentflow import publishing
from agentflow.core.errors import NotFoundError
from agentflow.core.ids import DEFAULT_WORKSPACE, as_uuid
from agentflow.core.records import VersionRecord, WorkflowRecord
from agentflow.resources import Resources
from agentflow.settings import Settings
from agentflow.store import workflows
from agentflow.store.database import Database
from agentflow.store.workflows import Published


class WorkflowCalls:
    """Publish workflows and look them up (a part of ``Engine``, which sets the attributes)."""

    db: Database
    settings: Settings
    resources: Resources

    async def publish_workflow(
        self,
        config: publishing.Config,
        *,
        draft: bool | None = None,
        enabled: bool | None = None,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> Published:
        """Validate and publish a config: a new version unless its content is unchanged.

        Args:
            config: a dict, YAML/JSON text, a file path, or a parsed config.
            draft / enabled: set the workflow's flags (None keeps them).

        Raises:
            ConfigError: the config is invalid (every offending path is listed), it has
                ``run_code`` nodes while code steps are off (``run_code_disabled``), or a
                ``run_workflow`` node names a missing or draft workflow or version.
        """
        return await publishing.publish(
            self.db, self.settings, config, draft=draft, enabled=enabled, workspace_id=workspace_id
        )

    async def get_workflow(
        self, ref: UUID | str, *, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> WorkflowRecord:
        """A workflow by id or name.

        Raises:
            NotFoundError: code ``workflow_not_found``.
        """
        found = None
        if (workflow_id := as_uuid(ref)) is not None:
            found = await workflows.get(self.db.pool, workspace_id, workflow_id)
        if found is None and isinstance(ref, str):
            found = await workflows.get_by_name(self.db.pool, workspace_id, ref)
        if found is None:
            raise NotFoundError("workflow_not_found", f"no workflow {ref!s} in this workspace")
        return found

    async def list_workflows(
        self, *, archived: bool | None = False, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> list[WorkflowRecord]:
        """The workspace's workflows: not archived (the default), archived (True) or all (None)."""
        return await workflows.list_all(self.db.pool, workspace_id, archived)

    async def get_version(
        self, ref: UUID | str, version: int | None = None, *, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> VersionRecord:
        """A version of a workflow (the latest when ``version`` is None)."""
        workflow = await self.get_workflow(ref, workspace_id=workspace_id)
        number = version or workflow.latest_version
        found = await workflows.get_version(self.db.pool, workspace_id, workflow.id, number)
        if found is None:
            raise NotFoundError("version_not_found", f"workflow {workflow.name!r} has no version {number}")
        return found

    async def set_flags(
        self, ref: UUID | str, *, draft: bool | None = None, enabled: bool | None = None,
        archived: bool | None = None, force: bool = False, workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> WorkflowRecord:  # fmt: skip
        """Change a workflow's draft/enabled/archived flags; see ``Resources.set_flags``."""
        workflow = await self.get_workflow(ref, workspace_id=workspace_id)
        return await self.resources.set_flags(
            workflow, draft=draft, enabled=enabled, archived=archived, force=force
        )

    async def delete_workflow(
        self, ref: UUID | str, *, force: bool = False, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> None:
        """Delete a workflow and everything of it; see ``Resources.delete_workflow``."""
        workflow = await self.get_workflow(ref, workspace_id=workspace_id)
        await self.resources.delete_workflow(workflow, force=force)
