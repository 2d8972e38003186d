"""An operator's hand on one run: cancel it, retry it from its failed step."""

from __future__ import annotations

import asyncpg

from agentflow.core.errors import ConflictError
from agentflow.core.lifecycle import RUN_CANCELED
from agentflow.core.records import RunRecord
from agentflow.runtime import metrics, tracing
from agentflow.runtime.configs import ConfigCache
from agentflow.runtime.lifecycle_listeners import LifecycleListeners
from agentflow.settings import Settings
from agentflow.store import runs
from agentflow.store.database import Database


class RunControl:
    """Cancels and retries runs (``Engine.cancel_run``, ``Engine.retry_run``)."""

    def __init__(
        self, db: Database, settings: Settings, configs: ConfigCache, listeners: LifecycleListeners
    ) -> None:
        self._db = db
        self._settings = settings
        self._configs = configs
        self._listeners = listeners

    async def cancel(self, run: RunRecord, reason: str) -> RunRecord:
        """Cancel ``run``: at once if no worker executes its step, else at its next boundary.

        Raises:
            ConflictError: ``run_already_ended``.
        """
        ws = run.workspace_id
        tell = self._settings.lifecycle_events and await self._listeners.tells(ws, RUN_CANCELED)
        updated = await runs.cancel(self._db.pool, ws, run.id, reason, tell=tell)
        if updated is None:
            raise ConflictError("run_already_ended", f"run {run.id} has already ended ({run.status})")
        if updated.status == "canceled":
            metrics.RUNS_TERMINAL.labels("canceled").inc()
            if tracing.enabled():  # no worker holds it: the run's span is emitted here
                tracing.end_run(
                    updated, "canceled", workflow=await self._configs.for_run(updated), reason=reason
                )
        return updated

    async def retry(self, run: RunRecord) -> RunRecord:
        """Retry a failed ``run`` from its failed step.

        Raises:
            ConflictError: ``run_not_failed``, or ``run_already_active`` for its key.
        """
        try:
            updated = await runs.retry(self._db.pool, run.workspace_id, run.id)
        except asyncpg.UniqueViolationError:
            raise ConflictError(
                "run_already_active", "another run now holds this run's enrollment key"
            ) from None
        if updated is None:
            raise ConflictError(
                "run_not_failed", f"only failed runs can be retried; this one is {run.status}"
            )
        return updated
