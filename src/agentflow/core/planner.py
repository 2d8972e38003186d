"""Decide what a structured run does next, and how a step's outcome moves the run.

The run's ``state`` document is ``{"node": <id of the next node or null>}``: where the run
is, not what it produced, plus ``"vars"``, the run's variables, when the workflow declares a
``state_definition`` (bounded by it). Step outputs live in ``run_steps`` (and in the worker's
memory while it holds the run), so a checkpoint writes a bounded amount whatever the run's length.
These functions only read and return values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from agentflow.core.agent_state import AgentState
from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.errors import ErrorInfo
from agentflow.core.inbox import AWAITING_EVENT
from agentflow.core.node_specs import ERROR_PORT, NodeSpec
from agentflow.core.retry import RetryPolicy
from agentflow.core.state_definition import initial_variables, saved_variables
from agentflow.core.statuses import RunStatus
from agentflow.core.templating import render


@dataclass(frozen=True)
class NodeResult:
    """What a node runner returns.

    Attributes:
        output: the step's JSON output.
        wake_after: sleep this long (durably) before the next node.
        wake_at: or sleep until this time (never earlier than now).
        finish: complete the run with ``output`` now.
        wake_on_event: end the sleep early when something arrives in the run's inbox.
        passes_inbox: the step did not use ``inbox``: its checkpoint leaves the rows for the
            next step instead of consuming them (a wait hands on what arrived).
        port: the output port whose edges fire (a condition's chosen branch).
    """

    output: Any = None
    wake_after: timedelta | None = None
    wake_at: datetime | None = None
    finish: bool = False
    wake_on_event: bool = False
    passes_inbox: bool = False
    port: str = "result"


@dataclass(frozen=True)
class Transition:
    """How a checkpoint moves the run.

    Attributes:
        status: the run's next status.
        state: the run's next state document.
        step_status: ``completed`` (the step advances) or ``failed`` (an attempt failed).
        wake_after / wake_at: for ``waiting``, when the run is due again.
        reason: why the run waits, fails or is suspended.
        output: the run's output when it completes.
        error: the run's error when it fails.
        handled: the step failed for good but the run goes on down the node's ``error`` port,
            with ``step_output`` (the error) as the failed step's output.
    """

    status: RunStatus
    state: dict[str, Any]
    step_status: str
    wake_after: timedelta | None = None
    wake_at: datetime | None = None
    reason: str | None = None
    output: Any = None
    error: ErrorInfo | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    handled: bool = False
    step_output: Any = None

    @property
    def advances(self) -> bool:
        """True when the run moves to its next step: the step completed, or its failure was
        handled down an ``error`` port."""
        return self.step_status == "completed" or self.handled


def initial_state(
    config: StructuredConfig | AgentConfig, variables: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The state a new run starts with: its first node and, when the workflow declares a
    ``state_definition``, every variable (``variables`` given, else defaults; already checked).
    An agent run starts deciding (``agentflow.core.agent_state``)."""
    if isinstance(config, AgentConfig):
        return AgentState().to_json()
    if config.state_definition is None:
        return {"node": config.start_id}
    return {"node": config.start_id, "vars": initial_variables(config.state_definition, variables)}


def variables(state: dict[str, Any]) -> dict[str, Any]:
    """The run's variables, ``{{ state.x }}`` in templates (none without a ``state_definition``)."""
    found = state.get("vars")
    return found if isinstance(found, dict) else {}


def save_to_state(
    config: StructuredConfig, state: dict[str, Any], node: NodeSpec, context: dict[str, Any], output: Any
) -> dict[str, Any]:
    """The state after ``node`` succeeded with ``output``: its ``save_to_state`` rendered and applied.

    Raises:
        StepFailure: ``template_error``, ``template_limit`` or ``state_invalid``, none retryable.
    """
    if not node.save_to_state:
        return state
    saves = render(node.save_to_state, {**context, "output": output}, field="save_to_state", node=node.id)
    updated = saved_variables(config.state_definition, variables(state), saves, node.id)
    return {**state, "vars": updated}


def current_node(config: StructuredConfig, state: dict[str, Any]) -> NodeSpec | None:
    """The node the run executes next, or None when there is none left."""
    node_id = state.get("node")
    return config.node(node_id) if isinstance(node_id, str) else None


def node_input(config: StructuredConfig, node: NodeSpec, run_input: Any, outputs: dict[str, Any]) -> Any:
    """What ``{{ input }}`` is for ``node``: the output of the direct predecessor that led to
    it (by predecessor id for a node that joins); the run's input for the first node."""
    sources = config.predecessors(node.id)
    if node.id == config.start_id or not sources:
        return run_input
    if node.joins:
        return {source: outputs.get(source) for source in sources}
    ran = [source for source in sources if source in outputs]
    return outputs[ran[-1]] if ran else None


def final_output(state: dict[str, Any], outputs: dict[str, Any]) -> Any:
    """The output of a run that ends after its last node's wait: that node's output."""
    after = state.get("after")
    return outputs.get(after) if isinstance(after, str) else None


def retry_policy(config: StructuredConfig, node: NodeSpec) -> RetryPolicy:
    """The node's policy, else the workflow's."""
    return node.retry or config.retry


def step_timeout(config: StructuredConfig, node: NodeSpec, tool_timeout: timedelta | None) -> float:
    """Seconds a step may run: the node's timeout, else the tool's, else the workflow's."""
    return (node.timeout or tool_timeout or config.timeout).total_seconds()


def on_success(
    config: StructuredConfig, state: dict[str, Any], node: NodeSpec, result: NodeResult
) -> Transition:
    """Record ``node``'s output and move to the next node, a wait, or completion."""
    next_id = None if result.finish else config.next_id(node, result.port)
    new_state = {**state, "node": next_id}
    waits = result.wake_after is not None or result.wake_at is not None
    if next_id is None and not waits:
        return Transition(RunStatus.COMPLETED, new_state, "completed", output=result.output)
    if next_id is None:
        new_state["after"] = node.id  # the run completes with this node's output once the wait is over
    if waits:
        return Transition(
            RunStatus.WAITING,
            new_state,
            "completed",
            wake_after=result.wake_after,
            wake_at=result.wake_at,
            reason=AWAITING_EVENT if result.wake_on_event else "timer",
        )
    return Transition(RunStatus.IN_PROGRESS, new_state, "completed")


def on_handled_failure(
    config: StructuredConfig, state: dict[str, Any], node: NodeSpec, error: ErrorInfo
) -> Transition | None:
    """When ``node`` failed for good and an edge leaves its ``error`` port: go on there, with
    the error as the failed step's output. None when the node does not handle failures."""
    target = config.next_id(node, ERROR_PORT)
    if target is None:
        return None
    return Transition(
        RunStatus.IN_PROGRESS, {**state, "node": target}, "failed", handled=True, step_output=error.to_json()
    )


def on_failure(
    policy: RetryPolicy,
    state: dict[str, Any],
    failures: int,
    error: ErrorInfo,
    retryable: bool,
    rand: Callable[[], float],
) -> Transition:
    """After the ``failures``-th failed attempt: back off and retry, or fail the run."""
    if retryable and policy.allows_another(failures):
        delay = policy.delay_after(failures, rand)
        return Transition(
            RunStatus.WAITING,
            state,
            "failed",
            wake_after=timedelta(seconds=delay),
            reason="retry",
            error=error,
        )
    reason = error.code if not retryable else "attempts_exhausted"
    final = ErrorInfo(
        error.code,
        error.message,
        {**error.details, "attempts": failures},
        error.solution or "Fix the cause, then retry the run from the failed step.",
    )
    return Transition(RunStatus.FAILED, state, "failed", reason=reason, error=final)
