"""Rerunning a run from a chosen step (issue 15): a new run that starts where the old one
stood when that step began, its earlier steps copied, not done again.

Each completed step keeps the run's state as its checkpoint left it (``run_steps.state``).
The state a rerun from step N starts with is the one of the last checkpoint that committed
before step N began; the steps that had completed by then are copied into the new run (their
outputs feed ``{{ steps.x }}`` and an agent's history), and everything else runs again, step
N and any branch still running at that moment included. Only where nothing of the old run
is still needed: not while a ``for_each`` loop or a child run it waited for was running
(their items belong to the old run; rerun from the step that started them, or from after
they ended). What the old run asked of people (an approval, a ``user_input``) is asked again,
and a child run an agent waited for is started again.
"""

from __future__ import annotations

from typing import Any

from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.run_moves import move_problems

LOOPS_RUNNING = (
    "a for_each loop or a child run was running at that point, and its items belong to the old "
    "run: rerun from the step that started it, or from a step after it ended"
)


def rerun_problems(state: dict[str, Any], config: AgentConfig | StructuredConfig) -> list[str]:
    """Why a rerun cannot start from ``state`` on ``config`` (empty: it can)."""
    if state.get("loops"):
        return [LOOPS_RUNNING]
    return move_problems(state, config)


def fresh_state(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with what tied it to the old run forgotten: the approval an agent waited for
    and the child it started, the request a ``user_input`` node asked (they are asked, or
    started, again)."""
    fresh = dict(state)
    agent = fresh.get("agent")
    if isinstance(agent, dict):
        fresh["agent"] = {k: v for k, v in agent.items() if k not in ("approval", "child")}
    if isinstance(fresh.get("ready"), list):
        fresh["ready"] = [
            {k: v for k, v in a.items() if k != "asked"} if isinstance(a, dict) else a for a in fresh["ready"]
        ]
    return fresh


def next_counter(state: dict[str, Any], copied: list[int]) -> int:
    """The rerun's step counter: past every copied step and every number the state's
    activations were given when they started beside others."""
    taken = list(copied)
    for activation in state.get("ready") or ():
        if isinstance(activation, dict) and isinstance(activation.get("seq"), int):
            taken.append(activation["seq"])
    return max(taken, default=-1) + 1
