"""Starting runs (``Engine.start_run_once``): checked, idempotent, in one round trip when it can.

Reading the workflow's latest version and inserting the run are two round trips. A starter
remembers the version it last started each workflow on (versions never change, so its
parsed config stays valid) and inserts the next run in one statement that holds only while
the workflow is still that (same id, same name, same latest version: ``start_if_current``).
When it is not, or when an idempotency key was used before, nothing was written and the start
takes the long way: read the version, then insert. Quick starts made at once share their
commit (``store.commit_groups``).

An eager start (``Settings.eager_start``, as Temporal's): when a worker of this process has a
free slot, the run is inserted already held and begun by it, and handed to it at once. Its
first step then waits for no NOTIFY, claim or begin: the start's commit is the only one before
it. A process that dies with such a run leaves it to the lease's expiry, as any claim would.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core import planner, starts
from agentflow.core.errors import ConflictError
from agentflow.core.ids import as_uuid
from agentflow.core.records import VersionRecord
from agentflow.core.state_definition import check_start_state
from agentflow.runtime import metrics, tracing
from agentflow.runtime.configs import ConfigCache
from agentflow.runtime.leases import LocalWorker
from agentflow.store import workflows
from agentflow.store.commit_groups import CommitGroup
from agentflow.store.run_starts import Lease, Started, StartKey, start_if_current, start_once

FindVersion = Callable[[UUID | str, int | None, UUID], Awaitable[VersionRecord]]
"""Reads a version or raises ``NotFoundError`` saying precisely what is missing."""


class RunStarter:
    """Starts runs of any workflow of any workspace.

    Args:
        pool: the database.
        configs: parsed configs by version.
        find_version: the slow, precise lookup used when the quick one finds nothing.
        remember: how many (workspace, workflow, version asked) to remember.

    Attributes:
        local: the worker that takes this process's starts eagerly (None: none does).
    """

    def __init__(
        self, pool: asyncpg.Pool, configs: ConfigCache, find_version: FindVersion, remember: int = 1024
    ) -> None:
        self._pool = pool
        # Quick starts made at once (API requests, a client's tasks) share commits.
        self._starts = CommitGroup(pool)
        self._configs = configs
        self._find_version = find_version
        self._size = remember
        self._recent: dict[tuple[UUID, str, int | None], VersionRecord] = {}
        self.local: LocalWorker | None = None

    async def start(
        self,
        workflow: UUID | str,
        payload: Any,
        *,
        state: dict[str, Any] | None,
        version: int | None,
        enrollment_key: str | None,
        start_from: str | None,
        inputs: Any,
        idempotency_key: str | None,
        workspace_id: UUID,
        conversation: dict[str, Any] | None = None,
    ) -> Started:
        """Start a run; see ``Engine.start_run_once`` for the arguments and errors."""
        key = None
        if idempotency_key is not None:
            asked = starts.fingerprint(
                payload=payload, state=state, version=version, enrollment_key=enrollment_key,
                start_from=start_from, inputs=inputs,
                # Only when given: a key used before conversations existed keeps its fingerprint.
                **({"conversation": conversation} if conversation else {}),
            )  # fmt: skip
            key = StartKey(starts.check_key(idempotency_key), asked)
        ref = as_uuid(workflow)
        traced = tracing.current_traceparent()  # the caller's span, when it has one
        seen = (workspace_id, str(workflow), version)
        local = self.local
        lease = local.reserve() if local is not None else None
        try:
            started, record = await self._insert(
                workflow, ref, seen, payload, state=state, version=version, enrollment_key=enrollment_key,
                start_from=start_from, inputs=inputs, key=key, workspace_id=workspace_id,
                conversation=conversation, traced=traced, lease=lease,
            )  # fmt: skip
        except BaseException:
            # Nothing was inserted or, rarely (a start canceled, or the database lost, while
            # its insert committed), a run held by no driver: its lease expires, and a claim
            # rescues it.
            if local is not None and lease is not None:
                local.unreserve()
            raise
        if local is not None and lease is not None:
            if started.replayed:
                local.unreserve()
            else:
                local.take(started.run, record)
        if started.replayed and key is not None and started.start_hash != key.hash:
            raise ConflictError(
                "idempotency_key_reused",
                f"idempotency key {key.key!r} already started run {started.run.id} with a different request",
                details={"run_id": str(started.run.id)},
                solution="Send a new key for a new start; resend the same request to get its run back.",
            )
        if not started.replayed:
            metrics.RUNS_STARTED.inc()
        return started

    async def _insert(
        self,
        workflow: UUID | str,
        ref: UUID | None,
        seen: tuple[UUID, str, int | None],
        payload: Any,
        *,
        state: dict[str, Any] | None,
        version: int | None,
        enrollment_key: str | None,
        start_from: str | None,
        inputs: Any,
        key: StartKey | None,
        workspace_id: UUID,
        conversation: dict[str, Any] | None,
        traced: str | None,
        lease: Lease | None,
    ) -> tuple[Started, VersionRecord]:
        """The run inserted (or replayed), the quick way when it can, and its version."""
        remembered = self._recent.get(seen)
        if remembered is not None:
            first = self._first_state(remembered, payload, state, start_from, inputs)
            with _conflicts(enrollment_key):
                run = await start_if_current(
                    self._starts, workspace_id, uuid.uuid4(), remembered, _input(payload), first,
                    enrollment_key, key, latest=version is None, name=None if ref else str(workflow),
                    trace_parent=traced, conversation=conversation, lease=lease,
                )  # fmt: skip
            if run is not None:
                return Started(run), remembered
        record = await workflows.resolve_version(
            self._pool, workspace_id, workflow_id=ref, name=str(workflow), version=version
        )
        if record is None:  # say precisely what is missing
            record = await self._find_version(workflow, version, workspace_id)
        first = self._first_state(record, payload, state, start_from, inputs)
        with _conflicts(enrollment_key):
            started = await start_once(
                self._pool, workspace_id, uuid.uuid4(), record.workflow_id, record.version,
                _input(payload), first, enrollment_key, key=key, trace_parent=traced,
                conversation=conversation, lease=lease,
            )  # fmt: skip
        self._remember(seen, record)
        return started, record

    def _first_state(
        self,
        record: VersionRecord,
        payload: Any,
        state: dict[str, Any] | None,
        start_from: str | None,
        inputs: Any,
    ) -> dict[str, Any]:
        config = self._configs.parse(record)
        starts.check_payload(config, payload)
        check_start_state(config.name, config.state_definition, state)
        return planner.initial_state(config, state, start_from=start_from, inputs=inputs)

    def _remember(self, seen: tuple[UUID, str, int | None], record: VersionRecord) -> None:
        if seen not in self._recent and len(self._recent) >= self._size:
            self._recent.pop(next(iter(self._recent)))  # the oldest
        self._recent[seen] = record


@contextlib.contextmanager
def _conflicts(enrollment_key: str | None) -> Iterator[None]:
    """Turns the unique index on active enrollment keys into ``run_already_active``."""
    try:
        yield
    except asyncpg.UniqueViolationError:
        raise ConflictError(
            "run_already_active", f"a run of this workflow is already active for key {enrollment_key!r}"
        ) from None


def _input(payload: Any) -> Any:
    return {} if payload is None else payload
