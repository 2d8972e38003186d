"""Rerunning an ended run from a chosen step (``engine.reruns``, issue 15).

``POST /api/ai/workflows/{id}/runs/{run_id}/rerun``, ``agentflow runs rerun``, and the
console's "Rerun from here": a new run of the same workflow (on the same version, or another
where the state fits) that starts where the old run stood when the step began, its earlier
steps copied (``core.reruns``). The old run is left as it was; the new one names it
(``rerun_of``). Temporal's reset and Inngest's rerun from a step do the same for their runs.
"""

from __future__ import annotations

import uuid

from agentflow.core.errors import ConfigError, ConflictError, NotFoundError
from agentflow.core.records import RunRecord
from agentflow.core.reruns import fresh_state, next_counter, rerun_problems
from agentflow.core.run_moves import moved_state
from agentflow.runtime.configs import ConfigCache
from agentflow.store import reruns, workflows
from agentflow.store.database import Database


class Reruns:
    """Makes reruns of ended runs."""

    def __init__(self, db: Database, configs: ConfigCache) -> None:
        self.db = db
        self._configs = configs

    async def rerun(self, run: RunRecord, from_step: int, *, version: int | None = None) -> RunRecord:
        """A new run of ``run``'s workflow from where ``run`` stood when step ``from_step``
        began, on ``version`` (default: the run's own).

        Raises:
            ConfigError: ``step_invalid`` for step 0 (start a new run instead),
                ``version_not_found``.
            NotFoundError: ``step_not_found``.
            ConflictError: ``run_not_ended``, ``run_is_a_child`` (rerun its parent), or
                ``rerun_not_possible`` with the problems in ``details``.
        """
        if from_step < 1:
            raise ConfigError(
                "step_invalid",
                "step 0 is where the run starts: a rerun from there is a new run",
                solution="Start a new run with the same input, or pick a later step.",
            )
        if not run.status.is_terminal:
            raise ConflictError(
                "run_not_ended",
                f"only an ended run can be rerun; this one is {run.status}",
                solution="Cancel it first, or wait for it to end.",
            )
        if run.parent_step is not None or run.state.get("agent_node"):
            raise ConflictError(
                "run_is_a_child",
                "this run is an item of its parent's loop or node, which waited for it",
                solution="Rerun the parent run from the step that started it.",
            )
        found = await reruns.base(self.db.pool, run.workspace_id, run.id, from_step)
        if found.began is None:
            raise NotFoundError("step_not_found", f"run {run.id} has no step {from_step}")
        target = version or run.workflow_version
        record = await workflows.get_version(self.db.pool, run.workspace_id, run.workflow_id, target)
        if record is None:
            raise ConfigError("version_not_found", f"this run's workflow has no version {target}")
        if found.state is None:
            raise ConflictError(
                "rerun_not_possible",
                f"the run's state before step {from_step} was not kept (steps recorded before "
                "reruns existed keep none)",
                solution="Start a new run with the same input.",
            )
        config = self._configs.parse(record)
        state = fresh_state(found.state)
        problems = rerun_problems(state, config)
        if problems:
            raise ConflictError(
                "rerun_not_possible",
                f"cannot rerun from step {from_step}: {problems[0]}",
                details={"problems": problems, "step": from_step},
                solution="Pick another step (or version) where the run's state fits.",
            )
        if target != run.workflow_version:
            state = moved_state(state, config)
        counter = next_counter(state, found.copied)
        return await reruns.create(
            self.db.pool, run, uuid.uuid4(), target, state, counter, from_step, found.copied
        )
