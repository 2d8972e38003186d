"""How a failed activation of a run whose branches run at once moves the run."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from agentflow.core import planner
from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ErrorInfo
from agentflow.core.graph import frontier
from agentflow.core.statuses import RunStatus

CONFIG = validate_config(
    {
        "name": "fan",
        "kind": "structured",
        "nodes": [{"id": n, "type": "tool", "tool": "echo"} for n in ("a", "b", "c")],
        "edges": [{"from": "a", "to": "b"}, {"from": "a", "to": "c"}],
    }
)
assert isinstance(CONFIG, StructuredConfig)
ERROR = ErrorInfo("boom", "it broke")


def state_with(*started: int) -> dict[str, Any]:
    f = frontier.finish_activation(
        CONFIG.graph, frontier.start(CONFIG.graph, "a"), frontier.Activation("a"), "result"
    )
    return frontier.dump(frontier.mark_started(f, dict(enumerate(started))), {}, CONFIG.graph)


def test_a_retry_beside_a_running_branch_keeps_the_run_going() -> None:
    state = state_with(1, 2)
    b = frontier.load(state, CONFIG.graph).ready[0]
    t = planner.retry_beside_others(CONFIG, state, b, 1, 0.5, ERROR)
    assert t.status is RunStatus.IN_PROGRESS and t.step_status == "failed" and not t.advances
    assert t.error == ERROR
    assert [a["node"] for a in t.state["ready"]] == ["c"]


def test_a_retry_with_nothing_else_to_do_makes_the_run_wait_for_it() -> None:
    state = state_with(1, 2)
    current = frontier.load(state, CONFIG.graph)
    only_b = frontier.dump(
        frontier.finish_activation(CONFIG.graph, current, current.ready[1], "result"), {}, CONFIG.graph
    )
    b = frontier.load(only_b, CONFIG.graph).ready[0]
    t = planner.retry_beside_others(CONFIG, only_b, b, 2, 0.5, ERROR)
    assert t.status is RunStatus.WAITING and t.reason == "retry"
    assert t.wake_after == timedelta(seconds=0.5)


def test_a_failed_run_gives_the_activation_a_fresh_budget() -> None:
    state = state_with(1, 2)
    current = frontier.load(state, CONFIG.graph)
    tired = frontier.dump(
        frontier.Frontier(ready=(frontier.Activation("b", ("a",), seq=1, failures=3), current.ready[1])),
        {},
        CONFIG.graph,
    )
    b = frontier.load(tired, CONFIG.graph).ready[0]
    fresh = planner.with_fresh_budget(CONFIG, tired, b)
    assert [a.get("failures", 0) for a in fresh["ready"]] == [0, 0]
    assert [a["seq"] for a in fresh["ready"]] == [1, 2], "the numbers stay"
    assert planner.with_fresh_budget(CONFIG, state, current.ready[0]) is state
