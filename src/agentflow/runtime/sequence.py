"""Run a held run's steps one after another: an agent run, or a graph run that runs one node
at a time (its graph does not fan out, or its ``max_parallel`` is 1).

Each step is checkpointed before the next one starts, except the steps of pure nodes and an
agent's decisions that ask only for calls the next checkpoint makes, whose rows ride in the
next checkpoint (``runtime.pure_steps``). A graph run's step that only moves
the run on, soon after a full checkpoint, is written as its row alone (``store.steps_ahead``).
``runtime.branches`` drives a graph run with several nodes running at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.runtime import log_context, step
from agentflow.runtime.branches import Checkpoint, LoadLoops, Refresh
from agentflow.runtime.failpoints import failpoint
from agentflow.runtime.pure_steps import PureSteps
from agentflow.store.checkpoints import Checkpointed

Execute = Callable[[step.Cursor], Awaitable[step.StepOutcome]]
WriteAhead = Callable[[step.StepOutcome, int], Awaitable[tuple[Checkpointed | None, bool]]]
"""Writes a step ahead of the run's row, fenced on the counter that row holds (the int);
answers what a checkpoint answers and whether it was written so (False: a full checkpoint)."""


async def drive_in_sequence(
    config: AgentConfig | StructuredConfig,
    cursor: step.Cursor,
    *,
    execute: Execute,
    checkpoint: Checkpoint,
    load_loops: LoadLoops,
    refresh: Refresh,
    stopping: asyncio.Event,
    steps: set[asyncio.Future[Any]],
    write_ahead: WriteAhead | None = None,
    behind: int | None = None,
    full_at: float | None = None,
) -> bool:
    """Run the run's steps from ``cursor`` until it leaves this worker.

    Args:
        config: the run's workflow version.
        cursor: where the run stands.
        execute: runs the step the cursor points at (a node, or an agent's decision or act).
        checkpoint: writes an outcome (with pure steps that ran before it); None when the run
            has no more work here (it ended, waits, was canceled, or the lease was lost).
        load_loops: the cursor with the items of the run's running loops counted.
        refresh: the cursor after a checkpoint that reports new inbox deliveries.
        stopping: set when the worker stops: the run is handed back after its next checkpoint.
        steps: the worker's set of this run's running steps (canceled when the lease is lost).
        write_ahead: writes a graph run's step that only moves it on as its row alone
            (``store.steps_ahead``); None: every step is checkpointed in full.
        behind: the step counter the run's row holds when the claim found steps written
            ahead of it (``cursor`` is past them): the first checkpoint is fenced on it.
        full_at: the monotonic time of the claim when it found the run's row current and no
            rescue counts to reset: its first steps may be written ahead, as after a full
            checkpoint then (None: the lease's first write is a full checkpoint).

    Returns:
        True when the run is still ours and idle because the worker stops (the caller
        releases it); False when it left this worker.
    """
    structured = isinstance(config, StructuredConfig)
    pure = PureSteps(behind, full_at)
    while True:
        if structured and "loops" in cursor.state and not cursor.state.get("ready"):
            # A loop wake: count its items (not before the steps of other branches).
            cursor = await load_loops(cursor)
        failpoint("before_step")
        log_context.bind_step(cursor.step_seq)
        # Run here, not as a task of its own: a lost lease cancels this task through ``steps``
        # while the step runs, and the caller stops; meanwhile the loop's other work (the
        # previous commit's connection going back to the pool) waits for the next checkpoint's
        # round trip instead of delaying the step.
        driver = asyncio.current_task()
        assert driver is not None
        steps.add(driver)
        try:
            outcome = await execute(cursor)
        finally:
            steps.discard(driver)
        failpoint("after_step")
        if (
            pure.keep(config, outcome, cursor)
            if isinstance(config, StructuredConfig)
            else pure.keep_decision(config, outcome, cursor)
        ):
            cursor = cursor.after(outcome)  # its row rides in the next checkpoint
            continue
        outcome = pure.fence(outcome)
        ahead = False
        if (
            write_ahead is not None
            and isinstance(config, StructuredConfig)
            and not stopping.is_set()  # the run is handed back with its row caught up
            and pure.may_write_ahead(config, outcome, cursor)
        ):
            done, ahead = await write_ahead(outcome, pure.row_counter(cursor))
        else:
            done = await checkpoint(outcome, pure.kept)
        if done is None:
            return False
        if ahead:
            pure.ahead(cursor, outcome)
        else:
            pure.written()
        cursor = await refresh(cursor.after(outcome, done), done)
        if stopping.is_set():
            return True
