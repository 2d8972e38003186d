"""The impact report as the engine exposes it: ``engine.reports``.

"What has this agent done for me?" (seed 000): events and meetings analysed, action items
across how many accounts, tasks created and completed on time, notifications sent, plans
generated, the human minutes that replaces (valued with each workflow's ``impact`` config),
and the tokens and dollars it cost; for one agent workflow or all of them, one account or
all, over any period.

Example:
    >>> report = await engine.reports.impact(workflow="renewals", since="7d")   # doctest: +SKIP
    >>> report.figures.tasks_created, report.minutes_saved                      # doctest: +SKIP
    (7, 71.0)
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from uuid import UUID

from agentflow.core.accounts import id_problem
from agentflow.core.activity import Bucket, WorkflowCost, bucket_starts, costs, fill
from agentflow.core.agent_config import Impact
from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import NAME_PATTERN, AgentConfig
from agentflow.core.errors import AgentflowError, ConfigError, NotFoundError
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.reports import ImpactFigures, ImpactReport, combine, parse_period
from agentflow.store import activity, reports, workflows
from agentflow.store.database import Database


class Reports:
    """Impact reports over agent workflows' runs."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def impact(
        self,
        *,
        workflow: UUID | str | None = None,
        account: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> ImpactReport:
        """What the agent workflows did in ``[since, until)``.

        Args:
            workflow: one workflow (id or name); None: every agent workflow of the workspace,
                each valued at its own ``impact`` rates.
            account: only what was done for this account.
            since / until: the period's bounds: datetimes, ISO 8601 text (UTC unless it says)
                or durations meaning "that long ago" (``7d``); None: unbounded.

        Raises:
            NotFoundError: ``workflow_not_found``.
            ConfigError: ``report_period_invalid`` (a bad bound, or a start not before the
                end), ``report_query_invalid`` (an account id that cannot be one),
                ``workflow_not_agent`` (a structured workflow).
        """
        now = datetime.now(UTC)
        start, end = parse_period(since, until, now)
        if account is not None and id_problem(account):
            raise ConfigError(
                "report_query_invalid",
                f"account {account[:60]!r} {id_problem(account)}",
                details={"errors": [{"path": "account", "message": id_problem(account)}]},
            )
        workflow_id = await self._workflow_id(workflow, workspace_id) if workflow is not None else None
        scope = await reports.workflows_in_scope(self.db.pool, workspace_id, workflow_id)
        if workflow_id is not None and (not scope or scope[0].kind not in ("agent", "employee")):
            name = scope[0].name if scope else str(workflow)
            raise ConfigError(
                "workflow_not_agent",
                f"workflow {name!r} is not an agent workflow; impact reports cover agent workflows",
                solution="Name an agent workflow, or none for all of them.",
            )
        figures, accounts = await reports.impact_figures(
            self.db.pool, workspace_id, [w.id for w in scope], account_id=account, since=start, until=end
        )
        shares = [(w.id, w.name, figures.get(w.id, ImpactFigures()), _impact(w.config)) for w in scope]
        totals, minutes, parts = combine(shares, accounts)
        return ImpactReport(
            workspace_id=workspace_id,
            workflow_id=workflow_id,
            workflow_name=scope[0].name if workflow_id is not None else None,
            account_id=account,
            since=start,
            until=end,
            generated_at=now,
            figures=totals,
            minutes=minutes,
            workflows=parts,
        )

    async def activity(
        self,
        *,
        since: datetime | str | None = "14d",
        until: datetime | str | None = None,
        interval: str = "day",
        workflow: UUID | str | None = None,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> tuple[list[Bucket], list[WorkflowCost], datetime, datetime]:
        """Runs by status, tasks and cost per ``interval`` (``hour``/``day``) bucket of
        ``[since, until)`` (bounds as for ``impact``; 14 days back to now by default), every
        bucket present; and cost per workflow. Returns (buckets, costs, since, until).

        Raises:
            NotFoundError: ``workflow_not_found``.
            ConfigError: ``report_period_invalid`` (a bad bound or interval, or over 400 buckets).
        """
        now = datetime.now(UTC)
        start, end = parse_period(since or "14d", until, now)
        start, end = start or now, end or now
        starts = bucket_starts(start, end, interval)
        workflow_id = await self._workflow_id(workflow, workspace_id) if workflow is not None else None
        runs, created, completed = await activity.activity_rows(
            self.db.pool, workspace_id, since=start, until=end, unit=interval, workflow_id=workflow_id
        )
        names = await activity.workflow_names(
            self.db.pool, workspace_id, list({r["workflow_id"] for r in runs})
        )
        return fill(starts, runs, created, completed), costs(runs, names), start, end

    async def _workflow_id(self, ref: UUID | str, workspace_id: UUID) -> UUID:
        """The id of a workflow named by id or name (a malformed one names none)."""
        found = None
        as_id = ref if isinstance(ref, UUID) else _as_uuid(ref)
        if as_id is not None:
            found = await workflows.get(self.db.pool, workspace_id, as_id)
        if found is None and isinstance(ref, str) and re.fullmatch(NAME_PATTERN, ref):
            found = await workflows.get_by_name(self.db.pool, workspace_id, ref)
        if found is None:
            raise NotFoundError("workflow_not_found", f"no workflow {str(ref)[:80]!r} in this workspace")
        return found.id


def _impact(config: dict[str, object]) -> Impact:
    """The ``impact`` rates of a stored agent config (the defaults if it no longer validates)."""
    try:
        parsed = validate_config(config)
    except AgentflowError:
        return Impact()
    return parsed.impact if isinstance(parsed, AgentConfig) else Impact()


def _as_uuid(ref: str) -> UUID | None:
    try:
        return uuid.UUID(ref)
    except ValueError:
        return None
