"""The engine's run methods: start runs, read them and their steps, cancel, retry, rerun,
wait for one to end (``Engine``)."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

from agentflow.core.conversations import check_conversation
from agentflow.core.errors import NotFoundError
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.records import RunRecord, StepRecord
from agentflow.core.run_filters import RunFilter
from agentflow.engine.workflow_calls import WorkflowCalls
from agentflow.reruns import Reruns
from agentflow.run_control import RunControl
from agentflow.run_starts import RunStarter
from agentflow.store import reads, run_search, steps_ahead
from agentflow.store.run_starts import Started


class RunCalls(WorkflowCalls):
    """Start and inspect runs (a part of ``Engine``, which sets the attributes)."""

    _starts: RunStarter
    _control: RunControl
    reruns: Reruns

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


def _uuid(value: UUID | str, code: str) -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(value)
    except ValueError:
        raise NotFoundError(code, f"{value!r} is not a valid id") from None
