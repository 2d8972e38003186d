"""A claimed run's begin: the mark after which a lost worker cuts the run's step off.

A worker loads what a claimed run needs, then begins its step (``runs.begin``): a worker lost
before the mark costs the run an unstarted rescue, one lost after it a rescue (``store.claims``).
An agent's begin carries its first decision's reads, so the decision waits for its answer. A
structured run's begin goes out as its first step starts, and the step's first write waits for
the answer instead (a round trip off every claimed start): the step may start unanswered only
while the claim's lease is young, since the claim set it ``lease_ttl`` ahead by the database
clock after this process sent it, so no other worker can have taken the run yet; a begin that
finds the lease lost all the same (the run was canceled meanwhile) fences that write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import replace

from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.records import RunRecord
from agentflow.runtime import agent_step
from agentflow.runtime.step import Cursor, StepOutcome
from agentflow.store import runs
from agentflow.store.commit_groups import RowFetcher
from agentflow.store.database import describe

logger = logging.getLogger(__name__)

YOUNG = 0.5
"""The share of ``lease_ttl`` since the claim was sent within which a step may start before
its begin is answered."""


class InFlight:
    """A begin sent but maybe not answered: the run's first write waits for it."""

    def __init__(self, answer: asyncio.Task[bool], run: RunRecord) -> None:
        self._answer = answer
        self._run = run
        self._held: bool | None = None  # the answer, once a write had it

    async def ready(self, outcome: StepOutcome) -> StepOutcome | None:
        """``outcome`` (of a write of the run), once the begin is answered; None when it
        found the lease lost (the write is not made: it would be fenced off). A begin that
        failed (the database unavailable, a conflict) does not stop the write: the write is
        fenced on the lease too, and marks the step begun itself, so a step that ran is not
        run again for want of its begin. The step's start is told as it was: its recorded
        duration, which the write counts back from the database's time to the step's start,
        takes in the wait for the answer (only the first write can wait)."""
        if self._held is not None:  # answered: a later write waits for nothing
            return outcome if self._held else None
        waited = 0.0
        if not self._answer.done():
            waiting = time.monotonic()
            await asyncio.wait([self._answer])
            waited = time.monotonic() - waiting
        try:
            self._held = self._answer.result()
        except Exception as exc:  # the write is fenced: it finds out for itself
            logger.info(
                "run %s: its begin failed (%s); its step's write goes on, fenced", self._run.id, describe(exc)
            )
            self._held = True
        if not self._held:
            logger.info("run %s: lease lost before its step began; its result is discarded", self._run.id)
            return None
        if not waited:
            return outcome
        return replace(outcome, step=replace(outcome.step, duration=outcome.step.duration + waited))

    async def settle(self) -> None:
        """Wait for the answer if the run left without writing; its error, if any, is the
        next claim's to meet (the run's lease expires)."""
        if not self._answer.done():
            await asyncio.wait([self._answer])
        with contextlib.suppress(asyncio.CancelledError, Exception):
            self._answer.result()


async def begin(
    commits: RowFetcher,
    config: AgentConfig | StructuredConfig,
    run: RunRecord,
    owner: str,
    cursor: Cursor,
    young: bool,
) -> tuple[Cursor | None, InFlight | None]:
    """Begin the claimed ``run``'s step, loaded as ``cursor``.

    ``young``: the claim's lease is young (see ``YOUNG``), so a structured run's begin may
    still be in flight as its step starts.

    Returns:
        The cursor to run from (None when the lease was lost) and the begin in flight, if any.
    """
    token = run.fencing_token
    if isinstance(config, AgentConfig):  # a decision's reads go in the same statement
        return await agent_step.begin(commits, run, token, owner, cursor), None
    if not young:
        return (cursor if await runs.begin(commits, run.workspace_id, run.id, token, owner) else None), None
    sent = asyncio.ensure_future(runs.begin(commits, run.workspace_id, run.id, token, owner))
    await asyncio.sleep(0)  # the begin's statement goes out before the step starts
    return cursor, InFlight(sent, run)


def is_young(claimed_at: float, lease_ttl: float) -> bool:
    """Whether a lease claimed at monotonic ``claimed_at`` (when the claim was sent) is young."""
    return time.monotonic() - claimed_at < YOUNG * lease_ttl
