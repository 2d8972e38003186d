"""Approvals, resuming suspended agent runs, and workspace budgets: what people decide.

Attached to the engine as ``engine.governance``.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from agentflow.core.agent_state import ALLOWANCE_KEYS, AgentState, check_budget
from agentflow.core.definitions import AgentConfig
from agentflow.core.errors import ConfigError, ConflictError, NotFoundError
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.records import RunRecord
from agentflow.core.statuses import RunStatus
from agentflow.runtime.configs import ConfigCache
from agentflow.store import agent_reads, approvals, reads
from agentflow.store.database import Database

APPROVAL_STATUSES = ("pending", "approved", "rejected", "expired")


class Governance:
    """Decide approvals, resume suspended runs, set daily budgets."""

    def __init__(self, db: Database, configs: ConfigCache) -> None:
        self._db = db
        self._configs = configs

    async def approvals(
        self,
        *,
        status: str | None = "pending",
        run_id: UUID | None = None,
        limit: int = 100,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> list[dict[str, Any]]:
        """Approval requests, newest first (``status`` None: all).

        Raises:
            ConfigError: ``status_invalid``.
        """
        if status is not None and status not in APPROVAL_STATUSES:
            raise ConfigError(
                "status_invalid",
                f"unknown approval status {status!r}",
                solution=f"Use one of {APPROVAL_STATUSES}.",
            )
        return await approvals.list_approvals(
            self._db.pool, workspace_id, status, run_id, max(1, min(limit, 500))
        )

    async def approval(self, approval_id: UUID, *, workspace_id: UUID = DEFAULT_WORKSPACE) -> dict[str, Any]:
        """One approval request.

        Raises:
            NotFoundError: ``approval_not_found``.
        """
        found = await approvals.get_approval(self._db.pool, workspace_id, approval_id)
        if found is None:
            raise NotFoundError("approval_not_found", f"no approval {approval_id} in this workspace")
        return found

    async def decide(
        self,
        approval_id: UUID,
        *,
        approve: bool,
        reason: str | None = None,
        decided_by: str | None = None,
        arguments_hash: str | None = None,
        edited: dict[str, Any] | None = None,
        via: str | None = None,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> dict[str, Any]:
        """Approve or reject a pending call; its run wakes and acts on the decision.

        Args:
            arguments_hash: the hash the person saw; the decision applies only if the request
                carries exactly this hash (it always applies only to the exact arguments).
            edited: approve the call with these arguments instead (checked against the tool's
                schema when the call runs).
            via: the channel the decision came through (``in_app``, ``email``, ``api``).

        Raises:
            NotFoundError: ``approval_not_found``.
            ConflictError: ``approval_decided``, ``approval_expired`` or ``approval_mismatch``.
        """
        for text, name in ((reason, "reason"), (decided_by, "decided_by")):
            if text is not None and (len(text) > 2000 or "\x00" in text):
                raise ConfigError(f"{name}_invalid", f"{name} must be at most 2000 characters, without NUL")
        status = "approved" if approve else "rejected"
        pool = self._db.pool
        if await approvals.decide(
            pool,
            workspace_id,
            approval_id,
            status,
            reason,
            decided_by,
            arguments_hash,
            edited if approve else None,
            via,
        ):
            return await self.approval(approval_id, workspace_id=workspace_id)
        current = await self.approval(approval_id, workspace_id=workspace_id)
        if current["status"] != "pending":
            raise ConflictError(
                "approval_decided",
                f"approval {approval_id} was already {current['status']}",
                details={"status": current["status"]},
            )
        if current["expired"]:
            raise ConflictError(
                "approval_expired", f"approval {approval_id} expired at {current['expires_at']}"
            )
        raise ConflictError(
            "approval_mismatch",
            "the request's arguments hash is not the one given: the call changed since you looked",
            details={"arguments_hash": current["arguments_hash"]},
            solution="Look at the request again (agentflow approvals show ID) and decide on what it says.",
        )

    async def resume(
        self, run_id: UUID, add: dict[str, float] | None = None, *, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> RunRecord:
        """Resume a suspended agent run, with ``add`` more budget (``model_calls``, ``tool_calls``,
        ``tokens``, ``usd``, ``wall_seconds``).

        Raises:
            NotFoundError: ``run_not_found``.
            ConflictError: ``run_not_suspended``, or ``budget_still_exceeded`` when the run would be
                suspended again at once.
            ConfigError: ``allowance_invalid``.
        """
        extra = add or {}
        bad = [
            k for k, v in extra.items() if k not in ALLOWANCE_KEYS or not isinstance(v, int | float) or v < 0
        ]
        if bad:
            raise ConfigError(
                "allowance_invalid",
                f"cannot add {bad}: give non-negative numbers for {', '.join(ALLOWANCE_KEYS)}",
            )
        run = await reads.get_run(self._db.pool, workspace_id, run_id)
        if run is None:
            raise NotFoundError("run_not_found", f"no run {run_id} in this workspace")
        if run.status != RunStatus.SUSPENDED:
            raise ConflictError("run_not_suspended", f"run {run_id} is {run.status.value}, not suspended")
        config = await self._configs.for_run(run)
        state = AgentState.from_json(run.state).with_allowance({k: float(v) for k, v in extra.items()})
        if isinstance(config, AgentConfig):
            elapsed = await agent_reads.elapsed_seconds(self._db.pool, workspace_id, run_id)
            breach = check_budget(config.budget, state, elapsed, before="model") or check_budget(
                config.budget, state, elapsed, before="tool"
            )
            if breach is not None:
                raise ConflictError(
                    "budget_still_exceeded", f"resuming now would suspend the run again: {breach.message}",
                    details=breach.details, solution=breach.solution,
                )  # fmt: skip
        # An agent node's child run keeps the rest of its state (the node, its prompt).
        resumed = await approvals.resume(
            self._db.pool, workspace_id, run_id, run.fencing_token, {**run.state, **state.to_json()}
        )
        if resumed is None:
            raise ConflictError("run_not_suspended", f"run {run_id} changed meanwhile; look at it again")
        return resumed

    async def budget(self, *, workspace_id: UUID = DEFAULT_WORKSPACE) -> dict[str, Any]:
        """The workspace's daily limits and today's (UTC) model spend."""
        return await approvals.budget(self._db.pool, workspace_id)

    async def set_budget(
        self, *, daily_usd: float | None, daily_tokens: int | None, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> dict[str, Any]:
        """Set the workspace's daily model budget (None: the server's default; 0: no limit).

        Raises:
            ConfigError: ``budget_invalid``.
        """
        if (daily_usd is not None and not 0 <= daily_usd <= approvals.MAX_DAILY_USD) or (
            daily_tokens is not None and not 0 <= daily_tokens <= approvals.MAX_DAILY_TOKENS
        ):
            raise ConfigError(
                "budget_invalid",
                f"daily budgets are 0 to {approvals.MAX_DAILY_USD:,} USD and 0 to"
                f" {approvals.MAX_DAILY_TOKENS:,} tokens",
            )
        await approvals.set_budget(self._db.pool, workspace_id, daily_usd, daily_tokens)
        return await self.budget(workspace_id=workspace_id)
