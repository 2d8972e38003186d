"""Writing a held run's steps for its worker: checkpoints, and steps written ahead of the
run's row (``store.steps_ahead``), with what follows each (metrics, the run's end in its
trace, a cancel the checkpoint reports, the worker's next look for a waiting run).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.records import RunRecord
from agentflow.core.statuses import RunStatus
from agentflow.runtime import metrics, step, tracing
from agentflow.runtime.failpoints import failpoint
from agentflow.runtime.lifecycle_listeners import LifecycleListeners
from agentflow.settings import Settings
from agentflow.store import runs, steps_ahead
from agentflow.store.checkpoints import PriorStep
from agentflow.store.commit_groups import CommitGroup
from agentflow.store.database import Database

logger = logging.getLogger(__name__)


class StepWriter:
    """Writes the steps of the runs one worker holds.

    Args:
        db: the database.
        settings: the worker's settings (lifecycle events, metrics labels).
        commits: the worker's commit group (its runs' writes share commits).
        listeners: which workspaces listen to lifecycle events.
        owner: the worker's lease owner name.
        plan_wake: asks the worker to look for due runs by a monotonic time (a run waits
            until then).
    """

    def __init__(
        self,
        db: Database,
        settings: Settings,
        commits: CommitGroup,
        listeners: LifecycleListeners,
        owner: str,
        *,
        plan_wake: Callable[[float], None],
    ) -> None:
        self._db = db
        self._settings = settings
        self._commits = commits
        self._listeners = listeners
        self._owner = owner
        self._plan_wake = plan_wake
        self._labels = metrics.BoundedLabels(settings.metrics_workflows_list)

    async def write_ahead(
        self,
        run: RunRecord,
        token: int,
        outcome: step.StepOutcome,
        config: AgentConfig | StructuredConfig,
        counter: int,
    ) -> tuple[runs.Checkpointed | None, bool]:
        """Write the outcome as its step's row alone, fenced on ``counter`` (the run's row's),
        unless lifecycle events tell of it (then in a full checkpoint)."""
        if self._settings.lifecycle_events:
            told = await self._listeners.with_events(run, outcome, None)
            if told.effects.events:
                return await self.checkpoint(run, token, outcome, config), False
        failpoint("before_checkpoint")
        done = await steps_ahead.write_ahead(
            self._commits,
            run.workspace_id,
            run.id,
            token,
            self._owner,
            counter,
            outcome.step,
            outcome.run.state,
            outcome.effects.usage,
        )
        failpoint("after_checkpoint")
        return await self._checkpointed(run, token, outcome, config, (), done), True

    async def checkpoint(
        self,
        run: RunRecord,
        token: int,
        outcome: step.StepOutcome,
        config: AgentConfig | StructuredConfig,
        prior: Sequence[PriorStep] = (),
    ) -> runs.Checkpointed | None:
        """Write the outcome (with ``prior``, pure steps run before it); return the checkpoint
        when the run still has immediate work here."""
        if outcome.effects.children and tracing.enabled():  # children continue the run's trace
            children = tracing.with_trace_parent(run, outcome.effects.children)
            outcome = replace(outcome, effects=replace(outcome.effects, children=children))
        if self._settings.lifecycle_events:
            outcome = await self._listeners.with_events(run, outcome, prior[0].step.seq if prior else None)
        failpoint("before_checkpoint")
        done = await runs.checkpoint(
            self._commits, run.workspace_id, run.id, token, self._owner,
            outcome.run, outcome.step, outcome.effects, prior,
        )  # fmt: skip
        failpoint("after_checkpoint")
        return await self._checkpointed(run, token, outcome, config, prior, done)

    async def _checkpointed(
        self,
        run: RunRecord,
        token: int,
        outcome: step.StepOutcome,
        config: AgentConfig | StructuredConfig,
        prior: Sequence[PriorStep],
        done: runs.Checkpointed | None,
    ) -> runs.Checkpointed | None:
        """Count and trace what the checkpoint wrote, finish a cancel it reports; ``done`` when
        the run still has immediate work here."""
        if done is None:
            metrics.FENCED.inc()
            logger.warning("run %s: lease lost; checkpoint of step %s discarded", run.id, outcome.step.seq)
            return None
        labels = self._labels.of(config.name)
        for earlier in prior:
            spent = earlier.usage
            metrics.observe_step(
                earlier.step.kind, earlier.step.status, earlier.step.duration, labels,
                *((spent.model, (spent.input_tokens, spent.output_tokens, spent.cached_input_tokens),
                   spent.usd_cost, spent.calls) if spent else ()),
            )  # fmt: skip
        written, usage = outcome.step, outcome.effects.usage
        metrics.observe_step(
            written.kind, written.status, written.duration, labels,
            *((usage.model, (usage.input_tokens, usage.output_tokens, usage.cached_input_tokens),
               usage.usd_cost, usage.calls) if usage else ()),
        )  # fmt: skip
        status = RunStatus(done.status)
        if done.cancel_requested and not status.is_terminal:
            tell = self._settings.lifecycle_events and await self._listeners.tells(
                run.workspace_id, "run.canceled"
            )
            if await runs.finish_cancel(
                self._db.pool, run.workspace_id, run.id, token, self._owner, tell=tell
            ):
                metrics.RUNS_TERMINAL.labels("canceled").inc()
                tracing.end_run(run, "canceled", workflow=config, reason="cancel_requested")
            return None
        if status.is_terminal:
            metrics.RUNS_TERMINAL.labels(status.value).inc()
            tracing.end_run(run, status.value, workflow=config, reason=outcome.run.status_reason,
                            error=outcome.run.error)  # fmt: skip
        if status == RunStatus.WAITING and done.due_in is not None:
            self._plan_wake(time.monotonic() + max(done.due_in, 0.0))
        return done if status == RunStatus.IN_PROGRESS else None
