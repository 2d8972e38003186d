"""Failpoint specs (the kill itself is exercised by the fault tests' workers)."""

from agentflow.runtime.failpoints import armed


def test_failpoint_specs_arm_names_with_probabilities() -> None:
    assert armed("") == {}
    assert armed("after_step=0.05, before_checkpoint") == {"after_step": 0.05, "before_checkpoint": 1.0}
