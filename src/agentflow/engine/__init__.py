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

from agentflow.access import AccessKeys
from agentflow.accounts import AccountBook
from agentflow.connecting import open_database
from agentflow.core.ids import DEFAULT_WORKSPACE as DEFAULT_WORKSPACE
from agentflow.core.tools import ToolRegistry
from agentflow.credentials import Credentials
from agentflow.engine.run_calls import RunCalls
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
from agentflow.store import reads
from agentflow.store.database import Database
from agentflow.store.embedded import EmbeddedServer
from agentflow.taskboard import TaskBoard
from agentflow.webhooks import Webhooks
from agentflow.workspaces import Workspaces

logger = logging.getLogger(__name__)


class Engine(RunCalls):
    """Publish workflows, start and inspect runs, run workers.

    Open it with ``Engine.open()`` (an async context manager); every method takes an
    optional ``workspace_id`` (the default workspace when omitted). The workflow methods are
    ``WorkflowCalls``' (``engine.workflow_calls``), the run methods ``RunCalls``'
    (``engine.run_calls``); the other parts are its attributes (``tasks``, ``events`` ...).
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

    def sealing_keys(self) -> tuple[bytes, tuple[bytes, ...]]:
        """The key secrets are sealed with now, and those they may still be sealed with.

        Raises:
            ConflictError: ``secret_key_missing`` (an external database without a key).
        """
        return self._sealing_key(), previous_sealing_keys(self.settings)

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
