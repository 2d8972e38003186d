"""The composition root: the Python API a user or a test holds.

Example:
    >>> async with Engine.open() as engine:                # doctest: +SKIP
    ...     published = await engine.publish_workflow(config_dict)
    ...     run = await engine.start_run(published.workflow.id, {"account_id": "a1"})
    ...     await engine.run_worker(until_idle=True)
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID

from agentflow import publishing
from agentflow.access import AccessKeys
from agentflow.accounts import AccountBook
from agentflow.connecting import open_database
from agentflow.core.conversations import check_conversation
from agentflow.core.errors import NotFoundError
from agentflow.core.ids import DEFAULT_WORKSPACE as DEFAULT_WORKSPACE
from agentflow.core.ids import as_uuid
from agentflow.core.records import RunRecord, StepRecord, VersionRecord, WorkflowRecord
from agentflow.core.run_filters import RunFilter
from agentflow.core.tools import ToolRegistry
from agentflow.credentials import Credentials
from agentflow.evals import Evals
from agentflow.eventlog import EventLog
from agentflow.governance import Governance
from agentflow.human_requests import HumanRequests
from agentflow.knowledge import KnowledgeBase
from agentflow.knowledge.embedding import configured_embedder
from agentflow.llm.base import ModelProvider
from agentflow.memories import Memories
from agentflow.oauth2_consents import Consents
from agentflow.people import Directory
from agentflow.reports import Reports
from agentflow.request_replies import RequestReplies
from agentflow.reruns import Reruns
from agentflow.resources import Resources
from agentflow.run_control import RunControl
from agentflow.run_moves import RunMoves
from agentflow.run_starts import RunStarter
from agentflow.run_streams import RunStreams
from agentflow.runtime.configs import ConfigCache
from agentflow.runtime.gatekeeper import EventGate
from agentflow.runtime.lifecycle_listeners import LifecycleListeners
from agentflow.runtime.worker import Worker
from agentflow.settings import Settings, previous_sealing_keys, sealing_key
from agentflow.store import reads, run_search, steps_ahead, workflows
from agentflow.store.database import Database
from agentflow.store.embedded import EmbeddedServer
from agentflow.store.run_starts import Started
from agentflow.store.workflows import Published
from agentflow.taskboard import TaskBoard
from agentflow.webhooks import Webhooks
from agentflow.workspaces import Workspaces

logger = logging.getLogger(__name__)


class Engine:
    """Publish workflows, start and inspect runs, run workers.

    Open it with ``Engine.open()`` (an async context manager); every method takes an
    optional ``workspace_id`` (the default workspace when omitted).
    """

    def __init__(self, db: Database, settings: Settings, embedded: EmbeddedServer | None) -> None:
        self.db = db
        self.settings = settings
        self._embedded = embedded
        self._configs = ConfigCache(db.pool)
        self._starts = RunStarter(
            db.pool, self._configs, lambda ref, version, ws: self.get_version(ref, version, workspace_id=ws)
        )
        self.evals = Evals(
            db,
            settings,
            self._configs,
            lambda ref, version, ws: self.get_version(ref, version, workspace_id=ws),
        )
        self.events = EventLog(db)
        self.tasks = TaskBoard(db)
        self.knowledge = KnowledgeBase(db)
        self.accounts = AccountBook(db)
        self.people = Directory(db)
        self.resources = Resources(db)
        self.run_moves = RunMoves(db, self._configs)
        self.reruns = Reruns(db, self._configs)
        self.memory = Memories(db)
        self.streams = RunStreams(db)
        self.reports = Reports(db)
        self.keys = AccessKeys(db)
        self.workspaces = Workspaces(db, self.keys)
        self.governance = Governance(db, self._configs)
        self.requests = HumanRequests(db, self.governance.decide)
        self.replies = RequestReplies(db)
        self._sealing_key = functools.partial(sealing_key, settings, embedded is not None)
        previous = previous_sealing_keys(settings)
        self._listeners = LifecycleListeners(db, self._configs)
        self._control = RunControl(db, settings, self._configs, self._listeners)
        self.webhooks = Webhooks(db, self._configs, self._sealing_key, previous, self._listeners)
        self.credentials = Credentials(db, self._sealing_key, settings.http_allow_list, previous)
        self.consents = Consents(db, self.credentials, self._sealing_key, settings.base_url, previous)

    @classmethod
    @asynccontextmanager
    async def open(
        cls, settings: Settings | None = None, *, migrate_schema: bool = True, wait: float = 0.0
    ) -> AsyncIterator[Engine]:
        """Connect (starting the embedded server when no URL is set) and migrate; ``wait``: as
        for ``connect``."""
        engine = await cls.connect(settings, migrate_schema=migrate_schema, wait=wait)
        try:
            yield engine
        finally:
            await engine.close()

    @classmethod
    async def connect(
        cls, settings: Settings | None = None, *, migrate_schema: bool = True, wait: float = 0.0
    ) -> Engine:
        """Like ``open`` without the context manager; call ``close()`` when done.

        ``wait``: seconds to keep trying while the database cannot serve yet (down, starting
        up, shutting down, too many connections), as a service that starts beside its database
        must; 0 fails at once.
        """
        settings = settings or Settings()
        configured_embedder(settings)  # AGENTFLOW_EMBEDDINGS=local without its extra fails here
        for module in settings.import_modules:
            importlib.import_module(module)
        db, embedded = await open_database(settings, migrate_schema=migrate_schema, wait=wait)
        return cls(db, settings, embedded)

    async def close(self) -> None:
        """Close the pool; stop the embedded server if this was its last user."""
        await self.db.close()
        if self._embedded is not None:
            await asyncio.to_thread(self._embedded.stop)

    # Workflows -------------------------------------------------------------------------

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

    def sealing_keys(self) -> tuple[bytes, tuple[bytes, ...]]:
        """The key secrets are sealed with now, and those they may still be sealed with.

        Raises:
            ConflictError: ``secret_key_missing`` (an external database without a key).
        """
        return self._sealing_key(), previous_sealing_keys(self.settings)

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

    # Runs ------------------------------------------------------------------------------

    async def start_run(
        self,
        workflow: UUID | str,
        payload: Any = None,
        *,
        state: dict[str, Any] | None = None,
        version: int | None = None,
        enrollment_key: str | None = None,
        start_from: str | None = None,
        inputs: Any = None,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> RunRecord:
        """Start a run on the workflow's latest version (or ``version``); see ``start_run_once``."""
        started = await self.start_run_once(
            workflow, payload, state=state, version=version, enrollment_key=enrollment_key,
            start_from=start_from, inputs=inputs, workspace_id=workspace_id,
        )  # fmt: skip
        return started.run

    async def start_run_once(
        self,
        workflow: UUID | str,
        payload: Any = None,
        *,
        state: dict[str, Any] | None = None,
        version: int | None = None,
        enrollment_key: str | None = None,
        start_from: str | None = None,
        inputs: Any = None,
        idempotency_key: str | None = None,
        conversation: dict[str, Any] | None = None,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> Started:
        """Start a run on the workflow's latest version (or ``version``), at most once per
        ``idempotency_key``: a start with a key already used returns that run (``replayed``).

        With ``settings.eager_start`` and a worker of this engine running with a free slot, the
        run comes back already held by that worker (``in_progress``), which runs it at once.

        Args:
            payload: the run's input, checked against the workflow's ``payload_format``.
            state: starting values of the run's variables, checked against its
                ``state_definition``; variables not given take their defaults.
            start_from: start at this node instead of the first (seed 001
                ``start_from_node``), with ``inputs`` as its ``{{ input }}``.
            idempotency_key: makes retries of this start safe (1 to 255 characters).
            conversation: what the run answers, ``{id, channel, title}`` (see
                ``core.conversations.check_conversation``); runs are listed by its id and channel.

        Raises:
            NotFoundError: no such workflow or version.
            ConfigError: ``payload_invalid`` or ``state_invalid``, listing each field;
                ``node_not_found`` for a ``start_from`` the workflow does not have;
                ``idempotency_key_invalid``.
            ConflictError: ``run_already_active`` when another active run holds the
                enrollment key; ``idempotency_key_reused`` when a start that asked for
                something else used the idempotency key.
        """
        return await self._starts.start(
            workflow, payload, state=state, version=version, enrollment_key=enrollment_key,
            start_from=start_from, inputs=inputs, idempotency_key=idempotency_key, workspace_id=workspace_id,
            conversation=check_conversation(conversation),
        )  # fmt: skip

    async def get_run(self, run_id: UUID | str, *, workspace_id: UUID = DEFAULT_WORKSPACE) -> RunRecord:
        """A run by id.

        Raises:
            NotFoundError: code ``run_not_found``.
        """
        found = await reads.get_run(self.db.pool, workspace_id, _uuid(run_id, "run_not_found"))
        if found is None:
            raise NotFoundError("run_not_found", f"no run {run_id} in this workspace")
        # A running run's row may lag the steps its worker wrote ahead of it (store.steps_ahead).
        return await steps_ahead.caught_up(self.db.pool, found)

    async def list_runs(
        self,
        *,
        workflow: UUID | str | None = None,
        status: str | None = None,
        limit: int = 50,
        before: UUID | None = None,
        loop_of: UUID | None = None,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> list[RunRecord]:
        """Runs, newest first, optionally of one workflow and/or status; the items of the
        loops of run ``loop_of`` instead of runs that are not loop items."""
        workflow_id = (await self.get_workflow(workflow, workspace_id=workspace_id)).id if workflow else None
        found = await reads.list_runs(
            self.db.pool, workspace_id, workflow_id=workflow_id, status=status, limit=limit, before=before,
            loop_of=loop_of,
        )  # fmt: skip
        return await steps_ahead.all_caught_up(self.db.pool, workspace_id, found)

    async def search_runs(
        self, wanted: RunFilter, *, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> list[RunRecord]:
        """Runs matching every filter of ``wanted`` (``agentflow.core.run_filters``), newest first."""
        found = await run_search.search_runs(self.db.pool, workspace_id, wanted)
        return await steps_ahead.all_caught_up(self.db.pool, workspace_id, found)

    async def list_steps(
        self, run_id: UUID | str, *, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> list[StepRecord]:
        """Every step attempt of a run, in order: its timeline."""
        run = await self.get_run(run_id, workspace_id=workspace_id)
        return await reads.list_steps(self.db.pool, workspace_id, run.id)

    async def cancel_run(
        self,
        run_id: UUID | str,
        *,
        reason: str = "canceled_by_request",
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> RunRecord:
        """Cancel a run: at once if it is not executing a step, else at its next step boundary.

        Raises:
            NotFoundError: no such run.
            ConflictError: ``run_already_ended``.
        """
        run = await self.get_run(run_id, workspace_id=workspace_id)
        return await self._control.cancel(run, reason)

    async def retry_run(self, run_id: UUID | str, *, workspace_id: UUID = DEFAULT_WORKSPACE) -> RunRecord:
        """Retry a failed run from its failed step.

        Raises:
            ConflictError: ``run_not_failed``, or ``run_already_active`` for its key.
        """
        run = await self.get_run(run_id, workspace_id=workspace_id)
        return await self._control.retry(run)

    async def rerun(
        self,
        run_id: UUID | str,
        from_step: int,
        *,
        version: int | None = None,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> RunRecord:
        """A new run from where the ended run ``run_id`` stood when its step ``from_step``
        began, its earlier steps copied (``agentflow.reruns``).

        Raises:
            NotFoundError: ``run_not_found``, ``step_not_found``.
            ConfigError: ``step_invalid``, ``version_not_found``.
            ConflictError: ``run_not_ended``, ``run_is_a_child``, ``rerun_not_possible``.
        """
        run = await self.get_run(run_id, workspace_id=workspace_id)
        return await self.reruns.rerun(run, from_step, version=version)

    async def wait_for_run(
        self, run_id: UUID | str, *, timeout: float = 60.0, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> RunRecord:
        """Poll until the run is terminal (or ``timeout`` seconds pass); return it."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            run = await self.get_run(run_id, workspace_id=workspace_id)
            if run.status.is_terminal or asyncio.get_running_loop().time() > deadline:
                return run
            await asyncio.sleep(0.02)

    # Workers ---------------------------------------------------------------------------

    def worker(
        self,
        *,
        concurrency: int | None = None,
        tools: ToolRegistry | None = None,
        dispatch: bool = True,
        gate: EventGate | None = None,
        model: ModelProvider | None = None,
        name: str | None = None,
    ) -> Worker:
        """A worker on this engine's database (call ``await worker.run()``); with ``dispatch``
        it also turns events into runs, asking ``gate`` about gated agent workflows; ``model``
        answers every model call (default: each workflow's ``model``). With
        ``settings.eager_start``, it takes this engine's starts (API and webhook calls) while it
        runs (the last made). ``name``: its lease owner name (default host:pid:random)."""
        worker = Worker(
            self.db, self.settings, concurrency=concurrency, tools=tools, dispatch=dispatch, gate=gate,
            model=model, sealing_key=self._sealing_key, name=name,
        )  # fmt: skip
        if self.settings.eager_start:
            self._starts.local = self.webhooks.local = worker
        return worker

    async def run_worker(self, *, concurrency: int | None = None, until_idle: bool = False) -> None:
        """Run a worker; with ``until_idle``, stop once no run is active or due."""
        worker = self.worker(concurrency=concurrency)
        if not until_idle:
            await worker.run()
            return
        task = asyncio.create_task(worker.run())
        while not task.done():
            await asyncio.sleep(0.05)
            if await reads.count_active(self.db.pool) == 0:
                worker.stop()
        await task


def _uuid(value: UUID | str, code: str) -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(value)
    except ValueError:
        raise NotFoundError(code, f"{value!r} is not a valid id") from None
