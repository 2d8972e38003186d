"""One tool call of an agent run: what it sees, what it returns, and how it is checked.

Model output is data: a call names a tool and carries JSON arguments. Before anything runs,
the name must be on the workflow's allow-list and the arguments must match the tool's JSON
Schema; a call that fails either gets an error result the model sees, and nothing happens.
"""

from __future__ import annotations

from dataclasses import field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentflow.core.chat import ToolCall
from agentflow.core.definitions import AgentConfig
from agentflow.core.frozen import frozen
from agentflow.core.records import RunRecord

if TYPE_CHECKING:
    from agentflow.agent.env import AgentEnv


@frozen
class CallContext:
    """What a tool call sees.

    Attributes:
        run: the run.
        config: its workflow version's config.
        call: the call.
        seq: the step's number (``run_id:seq`` is the idempotency key of external calls).
        attempt: 1, 2, ... for retries of this step.
        token: the lease's fencing token.
        account: the run's account record, when the call may need its owner (a notification, a
            call whose approval notifies the account owner); else None.
        now: the time the step started.
        env: models, knowledge, HTTP client, tools.
    """

    run: RunRecord
    config: AgentConfig
    call: ToolCall
    seq: int
    attempt: int
    token: int
    account: dict[str, Any] | None
    now: datetime
    env: AgentEnv

    @property
    def idempotency_key(self) -> str:
        """``run_id:seq``: the same on every attempt of this call."""
        return f"{self.run.id}:{self.seq}"


@frozen
class ToolOutcome:
    """What a tool call did.

    Attributes:
        result: what the model sees as the call's result.
        tasks / notifications: writes made by the checkpoint, exactly once.
        plan: the run's new plan.
        wait_until / wake_on_event: the run sleeps until then (or until a delivery).
        complete: the run completes with this summary.
        data: what ``complete`` gave as ``data`` (a workflow with an ``output_schema``).
        refused: the call was refused (not allowed, bad arguments, rejected).
        child: a run the call starts (an attached ``run_workflow``): its ``id``,
            ``workflow_id``, ``workflow_version``, ``input``, ``caller_node`` and ``state``.
        child_waits: the agent waits for the child's end, whose output is the call's result;
            False: the child runs on its own and ``result`` names it.
    """

    result: Any
    tasks: list[dict[str, Any]] = field(default_factory=list)
    notifications: list[dict[str, Any]] = field(default_factory=list)
    plan: dict[str, Any] | None = None
    wait_until: datetime | None = None
    wake_on_event: bool = True
    complete: str | None = None
    data: Any = None
    refused: bool = False
    child: dict[str, Any] | None = None
    child_waits: bool = True


def refusal(code: str, message: str) -> ToolOutcome:
    """An error result for the model; nothing else happens."""
    return ToolOutcome(result={"error": {"code": code, "message": message}}, refused=True)
