"""Moving parked runs to another version of their workflow (``engine.run_moves``, issue 15).

An operator who fixes a workflow can put the runs already waiting on the old version onto the
new one (``POST /api/ai/workflows/{id}/runs/migrate``, ``agentflow runs migrate``), each only
where it fits (``core.run_moves``). No peer offers this; without it a week-long approval
parked on a broken version is lost to a fix.
"""

from __future__ import annotations

import logging
from dataclasses import field
from uuid import UUID

from agentflow.core.errors import ConfigError
from agentflow.core.frozen import frozen
from agentflow.core.records import WorkflowRecord
from agentflow.core.run_moves import move_problems, moved_state
from agentflow.runtime.configs import ConfigCache
from agentflow.store import run_moves, workflows
from agentflow.store.database import Database

log = logging.getLogger(__name__)

MAX_RUNS = 1000
"""Runs one call looks at (call again for more)."""


@frozen
class Refused:
    """A run that did not move, and why."""

    run_id: UUID
    from_version: int
    problems: list[str]


@frozen
class Moves:
    """What a migration did (or, as a dry run, would do)."""

    to_version: int
    moved: list[tuple[UUID, int]] = field(default_factory=list)  # (run, the version it left)
    refused: list[Refused] = field(default_factory=list)


class RunMoves:
    """Moves parked runs between versions."""

    def __init__(self, db: Database, configs: ConfigCache) -> None:
        self.db = db
        self._configs = configs

    async def migrate(
        self,
        workflow: WorkflowRecord,
        *,
        to_version: int | None = None,
        from_version: int | None = None,
        run_ids: list[UUID] | None = None,
        dry_run: bool = False,
    ) -> Moves:
        """Move the workflow's parked runs (on ``from_version``, among ``run_ids``; at most
        ``MAX_RUNS``) to ``to_version`` (default: the latest), each where it fits.

        A run already on ``to_version`` is left alone; one that a worker claimed meanwhile is
        refused (``it changed while it was moved``).

        Raises:
            ConfigError: ``version_not_found`` for a ``to_version`` the workflow does not have.
        """
        target = to_version or workflow.latest_version
        record = await workflows.get_version(self.db.pool, workflow.workspace_id, workflow.id, target)
        if record is None:
            raise ConfigError(
                "version_not_found",
                f"workflow {workflow.name!r} has no version {target}",
                solution=f"Pick a version from 1 to {workflow.latest_version}.",
            )
        config = self._configs.parse(record)
        found = await run_moves.parked(
            self.db.pool, workflow.workspace_id, workflow.id,
            from_version=from_version, run_ids=run_ids, limit=MAX_RUNS,
        )  # fmt: skip
        result = Moves(target)
        for run in found:
            if run.workflow_version == target:
                continue
            problems = move_problems(run.state, config)
            state = moved_state(run.state, config)
            if not problems and not dry_run and not await run_moves.move(self.db.pool, run, target, state):
                problems = ["it changed while it was moved (a worker took it): try again"]
            if problems:
                result.refused.append(Refused(run.id, run.workflow_version, problems))
            else:
                result.moved.append((run.id, run.workflow_version))
        if result.moved and not dry_run:
            log.info("moved %d run(s) of %s to version %d", len(result.moved), workflow.name, target)
        return result
