"""What one agent step did, for the worker to checkpoint."""

from __future__ import annotations

from typing import Any

from agentflow.core.agent_knowledge import AgentKnowledge
from agentflow.core.errors import ErrorInfo
from agentflow.core.frozen import frozen
from agentflow.core.step_results import Transition
from agentflow.store.checkpoints import Effects


@frozen
class AgentStep:
    """One agent step's result, for the worker to checkpoint.

    Attributes:
        transition: how the run moves.
        kind / name: the step's kind (``agent.decide``, ``agent.tool``, ``agent.approval``,
            ``agent.budget``) and name (the model or the tool).
        input / output / error: the step's audit record.
        effects: writes made with the checkpoint.
        consumes_inbox: the step used the inbox (a decision saw the new events).
        duration: seconds it took.
        knowledge: what the step knew of its run for a decision (None: nothing yet), for the
            worker holding the run to keep.
    """

    transition: Transition
    kind: str
    name: str | None
    input: Any
    output: Any
    error: ErrorInfo | None
    effects: Effects
    consumes_inbox: bool = False
    duration: float = 0.0
    knowledge: AgentKnowledge | None = None
