"""The checkpoint: record a step and move its run in one statement, fenced on the lease.

A step's writes to the engine's own tables ride in the same statement (one commit), so they
happen exactly once with the step: consuming inbox rows, tasks, notifications (an outbox the
notifier delivers afterwards), an approval request, child runs, lifecycle events, an agent's
memory, and a model call's tokens and cost (on the step, the run, its per-model ``costs`` and
the workspace's day). The SQL is in ``agentflow.store.checkpoint_sql``. Each part is added to the
statement only when the step has one, so the common step pays for none of them.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Sequence
from dataclasses import field
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from agentflow.core.agent_state import WorkspaceSpend
from agentflow.core.frozen import frozen
from agentflow.store import checkpoint_sql as sql_parts
from agentflow.store.commit_groups import RowFetcher


@frozen
class StepWrite:
    """The audit row of one step attempt (``model`` and ``usage`` for a model call)."""

    seq: int
    attempt: int
    node_id: str | None
    kind: str
    name: str | None
    status: str
    input: Any
    output: Any
    error: dict[str, Any] | None
    duration: float


@frozen
class RunWrite:
    """How the run moves at a checkpoint.

    ``inbox_seen`` is the run's delivery count as of the inbox the step saw (a wait for an event
    is due at once when the row's count is higher); ``consumed`` lists the inbox rows the step
    used, consumed by this checkpoint (a child run's end wakes its parent by trigger, migration
    0033). ``counter`` is the run's step counter as the worker knows
    it (the checkpoint is fenced on it; default: the step's number) and ``next_counter``
    what it becomes (default: one more when the step advances the run). ``children_seen``
    is the run's count of ended child runs as its last count of loop items read it: a wait
    is due at once when a child ended since (migration 0036). ``ahead_usage``: steps written
    ahead of the run's row since ``counter`` may have called a model; the checkpoint adds their
    usage (read from their rows) to the run's totals and ``costs``.
    """

    status: str
    status_reason: str | None
    state: dict[str, Any]
    output: Any
    error: dict[str, Any] | None
    advance: bool
    wake_after: float | None = None
    wake_at: datetime | None = None
    inbox_seen: int = 0
    consumed: tuple[int, ...] = ()
    counter: int | None = None
    next_counter: int | None = None
    children_seen: int | None = None
    ahead_usage: bool = False


@frozen
class ModelUsage:
    """A step's model calls: tokens, USD cost and how many calls, written on the step, the run
    and the workspace day."""

    model: str
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    usd_cost: float
    calls: int = 1


@frozen
class Effects:
    """A step's writes to the engine's own tables, made exactly once with its checkpoint.

    Attributes:
        tasks: task documents (``title``, ``description``, ``assignee``, ``due_at``, ``priority``,
            ``account_id``, ``metadata``, ``expires_at`` or ``expires_in`` seconds, optional ``id``).
        notifications: notification documents (``id``, ``channel``, ``recipient``,
            ``subject``, ``body``, ``kind``, ``account_id``, ``metadata``).
        approval: a request to a person (``id``, ``arguments_hash``, ``expires_in`` seconds;
            an agent's approval: ``tool``, ``arguments``; a user_input node's: ``kind``,
            ``node_id``, ``message``, ``spec``, ``assignees``, ``channels``, ``timeout_action``).
        usage: a model call's tokens and cost.
        children: a loop's items to insert as child runs (``item_index``, ``state``, ``released``).
        release: ``(loop step, index)``: let that loop's items below the index run.
        cancel_loops: loop steps whose unfinished items are canceled.
        events: lifecycle events to publish (``topic``, ``message_id``, ``data``).
        memory: messages an agent step adds to its memory (``namespace``, ``key``, ``role``,
            ``content``, ``retention`` seconds).
        memory_summary: a memory's new summary (``namespace``, ``key``, ``summary``,
            ``through_seq``, ``retention``).
        return_tasks: answer the created tasks as a decision reads them (an agent's worker
            keeps them; about 0.1x the floor, so only a step whose run wants them asks).
    """

    tasks: list[dict[str, Any]] = field(default_factory=list)
    notifications: list[dict[str, Any]] = field(default_factory=list)
    approval: dict[str, Any] | None = None
    usage: ModelUsage | None = None
    children: list[dict[str, Any]] = field(default_factory=list)
    release: list[tuple[int, int]] = field(default_factory=list)
    cancel_loops: list[int] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    memory_summary: dict[str, Any] | None = None
    return_tasks: bool = False


NO_EFFECTS = Effects()


@frozen
class PriorStep:
    """A completed step that is written with the next step's checkpoint (a pure node's, or an
    agent's decision whose calls that checkpoint makes): its row, the run's state as it left
    it, when it ended (``time.monotonic()``) and, for a decision, its model call's usage (on
    its own row, and counted on the run and the workspace's day by that checkpoint) and the
    inbox rows it used (consumed by that checkpoint under the decision's number)."""

    step: StepWrite
    state: dict[str, Any]
    ended: float
    usage: ModelUsage | None = None
    consumed: tuple[int, ...] = ()

    def to_json(self, now: float) -> dict[str, Any]:
        """The row as the checkpoint's ``$PRIOR`` takes it, ``now`` being the monotonic time
        the statement is built."""
        s, u = self.step, self.usage
        row = {
            "seq": s.seq, "attempt": s.attempt, "node_id": s.node_id, "kind": s.kind, "name": s.name,
            "input": s.input, "output": s.output, "state": self.state, "ran": s.duration,
            "ago": max(now - self.ended, 0.0),
        }  # fmt: skip
        if self.consumed:
            row["consumed"] = list(self.consumed)
        if u is not None:
            row |= {
                "model": u.model, "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                "cached_input_tokens": u.cached_input_tokens, "usd_cost": round(u.usd_cost, 6),
            }  # fmt: skip
        return row


@frozen
class Checkpointed:
    """A checkpoint that held: the run's new status, when due later how soon, its delivery
    count (higher than the step saw: something arrived meanwhile), the database's time, a
    graph run's timers as stamped, when the step called a model, the workspace's spend
    today as the checkpoint left it (the run's next model call checks its budget on it
    instead of reading it again), and the tasks the step created as a decision reads them."""

    status: str
    due_in: float | None
    cancel_requested: bool
    inbox_seq: int = 0
    db_now: datetime | None = None
    timers: list[dict[str, Any]] | None = None
    spend: WorkspaceSpend | None = None
    created_tasks: list[dict[str, Any]] | None = None


_PARTS: tuple[tuple[str, str, str], ...] = (
    ("consume", sql_parts.CONSUME, "$ROWS"),
    ("tasks", sql_parts.TASKS, "$TASKS"),
    ("notifications", sql_parts.NOTIFICATIONS, "$NOTES"),
    ("approval", sql_parts.APPROVAL, "$APPROVAL"),
    ("children", sql_parts.CHILDREN, "$CHILDREN"),
    ("release", sql_parts.RELEASE, "$RELEASE"),
    ("cancel", sql_parts.CANCEL_LOOPS, "$CANCEL"),
    ("events", sql_parts.EVENTS, "$EVENTS"),
    ("memory", sql_parts.MEMORY, "$MEMORY"),
    ("memory_summary", sql_parts.MEMORY_SUMMARY, "$MEMSUM"),
    ("prior", sql_parts.PRIOR, "$PRIOR"),
)
"""Every optional part, in the order its parameter follows the fixed ones."""
_FIXED_PARAMETERS = 25
_RETURNED = (
    "r.workspace_id, r.id, r.status, r.due_at, r.cancel_requested, r.inbox_seq, r.due_in, r.db_now, r.timers"
)
"""What the checkpoint answers (not the state it wrote back: the worker has it)."""


GOING_ON_UNUSED = (5, 11, 12, 23)
"""The fixed parameters a going-on checkpoint leaves out (the run's new status, its wait and
the deliveries its step saw: only a run that stops here needs them)."""


@functools.cache
def _statement(
    parts: frozenset[str] = frozenset(),
    usage: bool = False,
    return_tasks: bool = False,
    timers: bool = True,
    children: bool = False,
    going_on: bool = False,
    own_usage: bool = True,
    prior_consumes: bool = False,
    ahead_usage: bool = False,
) -> str:
    """The checkpoint with only the ``parts`` this step needs (the common step needs none),
    with ``usage``, a model call's tokens and cost, with ``return_tasks`` (and tasks to
    create), the created tasks among what it answers, with ``timers`` (the run's new state
    has some), their times stamped by the database, with ``children`` a wait that is due
    at once when a child run ended since the count its step saw (its last parameter), and
    ``going_on`` for a run that stays in progress (without ``GOING_ON_UNUSED``); without
    ``own_usage``, the usage is a prior step's (its row has it): not on the step's own row;
    with ``prior_consumes``, a prior step (a kept decision) consumes the inbox rows it used;
    with ``ahead_usage``, the run's totals add the usage of the steps written ahead of its row."""
    move = sql_parts.GOING_ON if going_on else sql_parts.RUN_MOVE
    sql, number = sql_parts.CHECKPOINT.replace("$RUN_MOVE", move), _FIXED_PARAMETERS + 1
    if timers:
        sql = sql.replace("$STATE", sql_parts.TIMED_STATE).replace(
            "$RETURNED_STATE", sql_parts.TIMED_RETURNED
        )
        sql = sql.replace("$STEP_STATE", sql_parts.TIMED_STEP_STATE)
    else:
        sql = sql.replace("$STATE", "$7").replace("$RETURNED_STATE", sql_parts.UNTIMED_RETURNED)
        sql = sql.replace("$STEP_STATE", sql_parts.UNTIMED_STEP_STATE)
    added, columns, source = "", _RETURNED, "r"
    for name, fragment, marker in _PARTS:
        if name in parts:
            if name == "tasks":
                fragment = fragment.replace(
                    "$TASKS_RETURNING", sql_parts.TASKS_RETURNING if return_tasks else ""
                )
            if name == "prior":  # before the step's own row (checkpoint_sql.PRIOR)
                sql = sql.replace("$PRIOR_STEPS", fragment.replace(marker, f"${number}"))
                sql = sql.replace("$AFTER_PRIOR", sql_parts.AFTER_PRIOR)
                if prior_consumes:
                    added += sql_parts.PRIOR_CONSUME.replace(marker, f"${number}")
            else:
                added += fragment.replace(marker, f"${number}")
            number += 1
    run_usage = ""
    if ahead_usage:  # the steps written ahead's usage, with the step's own if it has some
        run_usage = sql_parts.RUN_USAGE_AHEAD.replace("$OWN_USAGE", sql_parts.OWN_USAGE if usage else "")
    elif usage:
        run_usage = sql_parts.RUN_USAGE
    if usage:
        names = {"$MODEL": number, "$IN": number + 1, "$OUT": number + 2, "$CACHED": number + 3}
        names["$USD"], names["$CALLS"] = number + 4, number + 5
        workspace_usage = sql_parts.WORKSPACE_USAGE
        for marker, n in sorted(names.items(), key=lambda kv: -len(kv[0])):
            cast = {"$USD": "::numeric", "$MODEL": "::text", "$CALLS": "::int"}.get(marker, "::bigint")
            run_usage = run_usage.replace(marker, f"${n}{cast}")
            workspace_usage = workspace_usage.replace(marker, f"${n}{cast}")
        columns_on_row = ", model, input_tokens, output_tokens, cached_input_tokens, usd_cost"
        step_values = ", " + ", ".join(
            f"${number + i}::{t}" for i, t in enumerate(("text", "bigint", "bigint", "bigint", "numeric"))
        )
        sql = sql.replace("$STEP_USAGE_COLUMNS", columns_on_row if own_usage else "")
        sql = sql.replace("$STEP_USAGE_VALUES", step_values if own_usage else "")
        added += workspace_usage
        columns, source = columns + sql_parts.SPEND_COLUMNS, source + sql_parts.SPEND_JOIN
        number += 6
    else:
        sql = sql.replace("$STEP_USAGE_COLUMNS", "").replace("$STEP_USAGE_VALUES", "")
    sql = sql.replace("$USAGE", run_usage)
    if children:
        sql = sql.replace("$CHILD_ENDS", sql_parts.CHILD_ENDS.replace("$SEEN", f"${number}"))
    else:
        sql = sql.replace("$CHILD_ENDS", "")
    sql = sql.replace("$PRIOR_STEPS", "").replace("$AFTER_PRIOR", "")
    if "cancel" in parts:  # the items of nested loops are found recursively
        sql = sql.replace("WITH r AS (", "WITH RECURSIVE r AS (", 1)
    if "tasks" in parts and return_tasks:
        columns += sql_parts.CREATED_TASKS
    statement = f"{sql.rstrip()}{added}\nSELECT {columns}\nFROM {source}"
    return _renumbered(statement, GOING_ON_UNUSED) if going_on else statement


def _renumbered(sql: str, dropped: Sequence[int]) -> str:
    """``sql`` without the parameters ``dropped`` (which it must no longer use), the others
    numbered down to close the gaps."""
    numbers = {n: n - sum(d < n for d in dropped) for n in range(1, 100) if n not in dropped}

    def renumber(match: re.Match[str]) -> str:
        number = int(match.group(1))
        if number in dropped:
            raise ValueError(f"the statement still uses ${number}")
        return f"${numbers[number]}"

    return re.sub(r"\$(\d+)\b", renumber, sql)


async def checkpoint(
    pool: RowFetcher,
    workspace_id: UUID,
    run_id: UUID,
    token: int,
    owner: str,
    run: RunWrite,
    step: StepWrite,
    effects: Effects = NO_EFFECTS,
    prior: Sequence[PriorStep] = (),
) -> Checkpointed | None:
    """Record a step, move the run and apply the step's effects in one statement, fenced on
    ``token``.

    ``pool`` may be a ``CommitGroup``: the checkpoint then shares its commit with other runs'.
    ``prior``: steps of pure nodes that ran since the run's last checkpoint, recorded with this
    one (``run.counter`` is then the first one's number, the counter the run's row holds).

    Returns None when the lease was lost: nothing was written.
    """
    args: list[Any] = [
        workspace_id, run_id, token, owner,
        run.status, run.status_reason, run.state, run.output, run.error, int(run.advance),
        run.wake_after, run.wake_at,
        step.seq, step.attempt, step.node_id, step.kind, step.name, step.status,
        step.input, step.output, step.error, step.duration, run.inbox_seen,
    ]  # fmt: skip
    expected = step.seq if run.counter is None else run.counter
    args += [expected, expected + int(run.advance) if run.next_counter is None else run.next_counter]
    built = time.monotonic()  # the kept steps' ends are told as seconds before this
    values: dict[str, Any] = {
        "consume": list(run.consumed) or None,
        "tasks": effects.tasks or None,
        "notifications": effects.notifications or None,
        "approval": effects.approval,
        "children": effects.children or None,
        "release": [list(pair) for pair in effects.release] or None,
        "cancel": effects.cancel_loops or None,
        "events": effects.events or None,
        "memory": effects.memory or None,
        "memory_summary": effects.memory_summary,
        "prior": [p.to_json(built) for p in prior] or None,
    }
    parts = frozenset(name for name, value in values.items() if value is not None)
    args += [values[name] for name, _, _ in _PARTS if name in parts]
    usage, own_usage = _usage(effects, prior)
    if usage is not None:
        args += [usage.model, usage.input_tokens, usage.output_tokens, usage.cached_input_tokens]
        args += [Decimal(str(round(usage.usd_cost, 6))), usage.calls]
    returns_tasks = effects.return_tasks and "tasks" in parts
    seen = run.children_seen if run.status == "waiting" else None
    if seen is not None:
        args.append(seen)
    going_on = run.status == "in_progress"
    statement = _statement(
        parts, usage is not None, returns_tasks, "timers" in run.state, seen is not None, going_on, own_usage,
        any(p.consumed for p in prior), run.ahead_usage,
    )  # fmt: skip
    if going_on:
        args = [arg for number, arg in enumerate(args, 1) if number not in GOING_ON_UNUSED]
    row = await pool.fetchrow(statement, *args)
    if row is None:
        return None
    spend: WorkspaceSpend | None = None
    if usage is not None:
        spend = (row["spend_usd"], row["spend_tokens"], row["daily_usd"], row["daily_tokens"])
    created = row["created_tasks"] if returns_tasks else None
    return Checkpointed(
        row["status"], row["due_in"], row["cancel_requested"], row["inbox_seq"], row["db_now"], row["timers"],
        spend, created,
    )  # fmt: skip


def _usage(effects: Effects, prior: Sequence[PriorStep]) -> tuple[ModelUsage | None, bool]:
    """The model usage the checkpoint counts on the run and the day, and whether it is the
    step's own (else a prior decision's, whose row carries it).

    Raises:
        ValueError: usage on more than one of them (a decision is kept only for calls that
            use no model, and alone).
    """
    kept = [p.usage for p in prior if p.usage is not None]
    if not kept:
        return effects.usage, True
    if effects.usage is not None or len(kept) > 1:
        raise ValueError("one checkpoint counts one model call's usage")
    return kept[0], False
