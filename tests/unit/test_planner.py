from datetime import UTC, datetime, timedelta

from agentflow.core import planner
from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ErrorInfo
from agentflow.core.retry import RetryPolicy
from agentflow.core.statuses import RunStatus
from agentflow.core.step_results import NodeResult


def config() -> StructuredConfig:
    c = validate_config(
        {
            "name": "p",
            "kind": "structured",
            "retry": {"max_attempts": 2, "initial_delay": "1s", "jitter": 0},
            "timeout": "1m",
            "nodes": [
                {"id": "a", "type": "tool", "tool": "t", "retry": {"max_attempts": 4}, "timeout": "5s"},
                {"id": "w", "type": "wait", "duration": "10s"},
                {"id": "b", "type": "tool", "tool": "t"},
            ],
        }
    )
    assert isinstance(c, StructuredConfig)
    return c


def test_success_moves_to_next_node_and_keeps_outputs() -> None:
    c = config()
    state = planner.initial_state(c)
    t = planner.on_success(c, state, c.node("a"), NodeResult({"x": 1}))
    assert t.status == RunStatus.IN_PROGRESS and t.advances
    assert t.state == {"node": "w"}, "outputs live in run_steps, not in the run's state"
    assert state == {"node": "a"}, "the input state must not be mutated"


def test_wait_result_makes_the_run_wait() -> None:
    c = config()
    t = planner.on_success(c, {"node": "w"}, c.node("w"), NodeResult(None, wake_after=timedelta(seconds=10)))
    assert (t.status, t.reason, t.wake_after, t.state["node"]) == (
        RunStatus.WAITING,
        "timer",
        timedelta(seconds=10),
        "b",
    )
    at = datetime(2030, 1, 1, tzinfo=UTC)
    t2 = planner.on_success(c, {"node": "w"}, c.node("w"), NodeResult(None, wake_at=at))
    assert t2.wake_at == at


def test_last_node_or_finish_completes() -> None:
    c = config()
    t = planner.on_success(c, {"node": "b"}, c.node("b"), NodeResult("out"))
    assert (t.status, t.output, t.state["node"]) == (RunStatus.COMPLETED, "out", None)
    t2 = planner.on_success(c, {"node": "a"}, c.node("a"), NodeResult("early", finish=True))
    assert t2.status == RunStatus.COMPLETED and t2.output == "early"


def test_failure_retries_per_node_policy_then_fails() -> None:
    c = config()
    node = c.node("a")
    policy = planner.retry_policy(c, node)
    assert policy.max_attempts == 4
    err = ErrorInfo("boom", "it broke")
    state = {"node": "a"}
    for failures in (1, 2, 3):
        t = planner.on_failure(policy, state, failures, err, True, lambda: 0.5)
        assert t.status == RunStatus.WAITING and t.reason == "retry" and not t.advances
        assert t.wake_after == timedelta(seconds=2 ** (failures - 1))
    final = planner.on_failure(policy, state, 4, err, True, lambda: 0.5)
    assert (final.status, final.reason) == (RunStatus.FAILED, "attempts_exhausted")
    assert final.error is not None and final.error.details["attempts"] == 4 and final.error.solution


def test_non_retryable_fails_at_once_with_its_code() -> None:
    t = planner.on_failure(
        RetryPolicy(max_attempts=5), {}, 1, ErrorInfo("bad_input", "no"), False, lambda: 0.0
    )
    assert (t.status, t.reason) == (RunStatus.FAILED, "bad_input")


def test_timeouts_resolve_node_then_tool_then_workflow() -> None:
    c = config()
    assert planner.step_timeout(c, c.node("a"), timedelta(seconds=99)) == 5
    assert planner.step_timeout(c, c.node("b"), timedelta(seconds=99)) == 99
    assert planner.step_timeout(c, c.node("b"), None) == 60
    assert planner.retry_policy(c, c.node("b")).max_attempts == 2
