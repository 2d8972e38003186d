"""Decide what a structured run does next, and how a step's outcome moves the run.

The run's ``state`` document is ``{"node": <id of the next node or null>}``: where the run
is, not what it produced, plus ``"vars"``, the run's variables, when the workflow declares a
``state_definition`` (bounded by it). Step outputs live in ``run_steps`` (and in the worker's
memory while it holds the run), so a checkpoint writes a bounded amount whatever the run's length.
These functions only read and return values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from agentflow.core.agent_state import AgentState
from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.errors import ConfigError, ErrorInfo
from agentflow.core.graph import frontier
from agentflow.core.graph.frontier import Activation
from agentflow.core.graph.looping import POLL_SECONDS, loop_poll
from agentflow.core.inbox import AWAITING_EVENT
from agentflow.core.node_specs import ERROR_PORT, NodeSpec
from agentflow.core.retry import RetryPolicy
from agentflow.core.state_definition import initial_variables, saved_variables
from agentflow.core.statuses import RunStatus
from agentflow.core.step_results import NodeResult, Transition
from agentflow.core.templating import render


def initial_state(
    config: StructuredConfig | AgentConfig,
    variables: dict[str, Any] | None = None,
    *,
    start_from: str | None = None,
    inputs: Any = None,
) -> dict[str, Any]:
    """The state a new run starts with: its first node (or ``start_from``, whose ``{{ input }}``
    is then ``inputs``) and, when the workflow declares a ``state_definition``, every variable
    (``variables`` given, else defaults; already checked). An agent run starts deciding
    (``agentflow.core.agent_state``).

    Raises:
        ConfigError: ``node_not_found`` when ``start_from`` is not a node of the workflow, or
            the workflow is an agent workflow.
    """
    if isinstance(config, AgentConfig):
        if start_from is not None:
            raise ConfigError("node_not_found", "an agent workflow has no nodes to start from")
        return AgentState().to_json()
    kept = (
        {}
        if config.state_definition is None
        else {"vars": initial_variables(config.state_definition, variables)}
    )
    if start_from is None:
        return {"node": config.start_id, **kept}
    if start_from not in config.graph.nodes:
        known = ", ".join(sorted(config.graph.nodes))
        raise ConfigError(
            "node_not_found",
            f"workflow {config.name!r} has no node {start_from!r}; its nodes: {known}",
            solution="Start from one of the workflow's node ids.",
        )
    began = frontier.start_at(config.graph, start_from, inputs)
    return frontier.dump(began, kept, config.graph)


def variables(state: dict[str, Any]) -> dict[str, Any]:
    """The run's variables, ``{{ state.x }}`` in templates (none without a ``state_definition``)."""
    found = state.get("vars")
    return found if isinstance(found, dict) else {}


def save_to_state(
    config: StructuredConfig, state: dict[str, Any], node: NodeSpec, context: Mapping[str, Any], output: Any
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


def current_activation(config: StructuredConfig, state: dict[str, Any]) -> Activation | None:
    """The activation the run executes next, or None when none is ready."""
    ready = frontier.load(state, config.graph).ready
    return ready[0] if ready else None


def released(
    config: StructuredConfig, state: dict[str, Any], now: datetime | None, *, inbox_news: bool
) -> dict[str, Any]:
    """``state`` with every timer due at database time ``now`` fired (and, with
    ``inbox_news``, every timer that a delivery ends): what is ready after a wait."""
    if "timers" not in state:
        return state
    before = frontier.load(state, config.graph)
    after = frontier.release(config.graph, before, now, inbox_news=inbox_news)
    return state if after is before else frontier.dump(after, state, config.graph)


def node_input(
    config: StructuredConfig, activation: Activation, run_input: Any, outputs: dict[str, Any]
) -> Any:
    """What ``{{ input }}`` is for ``activation``: the output of the predecessor whose link
    made it ready (by predecessor id for a node that joins); the run's input for the first."""
    node = config.node(activation.node)
    if activation.supplied:
        return activation.input
    if not activation.via:
        return run_input if node.id == config.start_id or not config.predecessors(node.id) else None
    if node.joins:
        return {source: outputs.get(source) for source in activation.via}
    return outputs.get(activation.via[0])


def final_output(state: dict[str, Any], outputs: dict[str, Any]) -> Any:
    """The output of a run that ends with nothing ready: the last node's output."""
    last = state.get("after", state.get("last"))
    return outputs.get(last) if isinstance(last, str) else None


def on_nothing_ready(config: StructuredConfig, state: dict[str, Any], outputs: dict[str, Any]) -> Transition:
    """The run was taken up with nothing ready: it completes, or waits for its timers."""
    left = frontier.load(state, config.graph)
    if left.empty:
        return Transition(RunStatus.COMPLETED, state, "completed", output=final_output(state, outputs))
    return moved(config, state, left, "completed", None)


def retry_policy(config: StructuredConfig, node: NodeSpec) -> RetryPolicy:
    """The node's policy, else the workflow's."""
    return node.retry or config.retry


def step_timeout(config: StructuredConfig, node: NodeSpec, tool_timeout: timedelta | None) -> float:
    """Seconds a step may run: the node's limit (its timeout), else the tool's, else the workflow's."""
    return (node.step_limit() or tool_timeout or config.timeout).total_seconds()


def on_success(
    config: StructuredConfig,
    state: dict[str, Any],
    node: NodeSpec,
    result: NodeResult,
    done: Activation | None = None,
) -> Transition:
    """The run after ``node`` (activation ``done``, by default the first ready) succeeded:
    the links of the port it fired fire (after its wait, if it waits), the others are
    skipped; a ``finish`` completes the run."""
    graph = config.graph
    before = frontier.load(state, graph)
    done = done or (before.ready[0] if before.ready else frontier.Activation(node.id))
    if result.finish:  # the run ends here, whatever else was ready or asleep
        ended = frontier.dump(frontier.Frontier(skipped=before.skipped), state, graph)
        return Transition(RunStatus.COMPLETED, ended, "completed", output=result.output)
    waits = result.wake_after is not None or result.wake_at is not None
    if not waits:
        after = frontier.finish_activation(graph, before, done, result.port)
        return moved(config, state, after, "completed", result.output)
    reason = AWAITING_EVENT if result.wake_on_event else "timer"
    targets = graph.outgoing(node.id, result.port)
    if (
        len(before.ready) == 1
        and not before.timers
        and not before.arrivals
        and not before.skipped
        and len(targets) <= 1
    ):
        # A wait on a linear stretch: the run itself waits (due_at), as before graphs.
        following = targets[0].target if targets else None
        if following is None or len(graph.incoming(following)) == 1:
            linear = {**{k: v for k, v in state.items() if k == "vars"}, "node": following}
            if following is None:
                linear["after"] = node.id  # completes with this node's output once the wait is over
            return Transition(
                RunStatus.WAITING,
                linear,
                "completed",
                wake_after=result.wake_after,
                wake_at=result.wake_at,
                reason=reason,
            )
    timer = frontier.Timer(
        node.id,
        result.port,
        secs=result.wake_after.total_seconds() if result.wake_after is not None else None,
        at=result.wake_at.isoformat() if result.wake_at is not None else None,
        on_event=result.wake_on_event,
    )
    after = frontier.finish_activation(graph, before, done, result.port, later=timer)
    return moved(config, state, after, "completed", result.output)


def moved(
    config: StructuredConfig,
    state: dict[str, Any],
    after: frontier.Frontier,
    step_status: str,
    output: Any,
    *,
    handled: ErrorInfo | None = None,
    **effects: Any,
) -> Transition:
    """The transition to ``after``: go on, wait (for timers, or loop items, counted again at
    least every ``POLL_SECONDS``, less often while they are quiet), or complete. ``effects``:
    ``Transition`` fields to set."""
    new_state = frontier.dump(after, state, config.graph)
    extra: dict[str, Any] = {"handled": True, "step_output": handled.to_json()} if handled is not None else {}
    extra.update(effects)
    if after.ready:
        return Transition(RunStatus.IN_PROGRESS, new_state, step_status, **extra)
    if after.timers or after.loops:
        secs, at = frontier.earliest(after)
        if after.loops:
            poll = min(
                loop_poll(getattr(config.node(o.node), "child_poll_seconds", POLL_SECONDS), o.quiet)
                for o in after.loops
            )
            secs = poll if secs is None else min(secs, poll)
        retries = all(t.retry is not None for t in after.timers) and not after.loops
        reason = (
            AWAITING_EVENT
            if any(t.on_event for t in after.timers)
            else ("retry" if retries else "timer")
            if after.timers
            else "loop"
        )
        return Transition(
            RunStatus.WAITING,
            new_state,
            step_status,
            wake_after=timedelta(seconds=secs) if secs is not None else None,
            wake_at=datetime.fromisoformat(at) if at is not None else None,
            reason=reason,
            **extra,
        )
    return Transition(RunStatus.COMPLETED, new_state, step_status, output=output, **extra)


def on_handled_failure(
    config: StructuredConfig,
    state: dict[str, Any],
    node: NodeSpec,
    error: ErrorInfo,
    done: Activation | None = None,
) -> Transition | None:
    """When ``node`` (activation ``done``) failed for good and an edge leaves its ``error``
    port: go on there, with the error as the failed step's output. None when the node does
    not handle failures."""
    graph = config.graph
    if not graph.outgoing(node.id, ERROR_PORT):
        return None
    before = frontier.load(state, graph)
    done = done or (before.ready[0] if before.ready else frontier.Activation(node.id))
    after = frontier.finish_activation(graph, before, done, ERROR_PORT)
    return moved(config, state, after, "failed", None, handled=error)


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
        delay = policy.delay_honouring(failures, rand, error.details.get("retry_after"))
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


def park_for_answer(
    config: StructuredConfig, state: dict[str, Any], done: Activation, asked: int, secs: float, output: Any
) -> Transition:
    """After ``done`` asked a person in step ``asked`` (or looked and found no answer yet):
    it waits for its inbox (see ``frontier.park``) while the rest of the run goes on."""
    after = frontier.park(frontier.load(state, config.graph), done, asked, secs)
    return moved(config, state, after, "completed", output)


def retry_beside_others(
    config: StructuredConfig,
    state: dict[str, Any],
    done: Activation,
    failures: int,
    delay: float,
    error: ErrorInfo,
) -> Transition:
    """After ``done`` failed its ``failures``-th attempt in a run whose other nodes go on:
    it alone sleeps ``delay`` seconds and runs again (the run waits only when nothing else
    is left to do)."""
    after = frontier.retry_later(frontier.load(state, config.graph), done, failures, delay)
    return moved(config, state, after, "failed", None, error=error)


def with_fresh_budget(config: StructuredConfig, state: dict[str, Any], failed: Activation) -> dict[str, Any]:
    """``state`` with ``failed``'s attempts forgotten, so that a retried run gives it a
    whole attempt budget again (its step number stays), and a ``user_input`` that failed
    waiting for its answer asks anew (its old request is over)."""
    if not failed.failures and failed.asked is None:
        return state
    current = frontier.load(state, config.graph)
    ready = tuple(replace(a, failures=0, asked=None) if a == failed else a for a in current.ready)
    return frontier.dump(replace(current, ready=ready), state, config.graph)
