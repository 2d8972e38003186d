"""Moving a parked run to another version of its workflow (``runs migrate``, issue 15).

A run keeps the version it started on; an operator can move one that is parked (waiting for
a timer, an event or a person, or suspended) to a newer version, so a week-long approval is
not lost for want of a fix. A structured run may move only where everything its frontier
names exists in the new version: each node it will run or waits in, each port a timer will
fire and each link a join has seen; its variables must be declared there with their types.
Variables the new version declares and the run lacks get their defaults. A run whose
``for_each`` items are running does not move (each item runs on the version it started on).
An agent run's state is the agent's own (plan, inbox, history): it moves to any version.
"""

from __future__ import annotations

from typing import Any

from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.graph import frontier as frontiers
from agentflow.core.state_definition import value_problem


def move_problems(state: dict[str, Any], config: AgentConfig | StructuredConfig) -> list[str]:
    """Why a run in ``state`` cannot move to ``config`` (empty: it can)."""
    if not isinstance(config, StructuredConfig):
        return []
    graph = config.graph
    problems: list[str] = []
    if state.get("loops"):
        return ["its for_each loop is running items, which stay on the version they started on"]

    def need(node: str | None, role: str) -> None:
        if node is not None and node not in graph.nodes:
            problems.append(f"node {node!r}, which {role}, is not in this version")

    if "ready" in state or "timers" in state:
        found = frontiers.load(state, graph)
        for activation in found.ready:
            need(activation.node, "it runs next")
        for timer in found.timers:
            need(timer.source, "it waits in")
            if (
                timer.port
                and timer.source in graph.nodes
                and timer.port not in graph.nodes[timer.source].output_ports()
            ):
                problems.append(f"node {timer.source!r} has no port {timer.port!r} for its timer to fire")
        for node, seen in found.arrivals.items():
            need(node, "joins its branches")
            for arrival in seen:
                source, _, port = arrival.partition("/")
                if node in graph.nodes and not any(
                    link.target == node for link in graph.outgoing(source, port)
                ):
                    problems.append(
                        f"the link {source}/{port} -> {node} its join has seen is not in this version"
                    )
        need(found.last, "it would complete with")
    else:
        need(state.get("node"), "it runs next")
        need(state.get("after"), "it would complete with")
    problems.extend(_variable_problems(state.get("vars") or {}, config))
    return problems


def moved_state(state: dict[str, Any], config: AgentConfig | StructuredConfig) -> dict[str, Any]:
    """``state`` as it is on ``config``: new declared variables get their defaults."""
    if not isinstance(config, StructuredConfig) or not config.state_definition:
        return state
    variables = dict(state.get("vars") or {})
    for name, declared in config.state_definition.items():
        variables.setdefault(name, declared.default)
    return {**state, "vars": variables}


def _variable_problems(variables: dict[str, Any], config: StructuredConfig) -> list[str]:
    declared = config.state_definition or {}
    problems = []
    for name, value in variables.items():
        if name not in declared:
            problems.append(f"its variable {name!r} is not declared in this version's state_definition")
        elif (problem := value_problem(declared[name].type, value)) is not None:
            problems.append(f"its variable {name!r} {problem} (declared {declared[name].type} here)")
    return problems
