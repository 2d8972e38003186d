import random
from datetime import timedelta

import pytest
from pydantic import ValidationError

from agentflow.core.retry import RetryPolicy


def test_exponential_without_jitter() -> None:
    policy = RetryPolicy(initial_delay="1s", backoff_factor=2, max_delay="10s", jitter=0)
    delays = [policy.delay_after(n, random.random) for n in range(1, 7)]
    assert delays == [1, 2, 4, 8, 10, 10]


def test_jitter_stays_within_bounds_and_spreads() -> None:
    policy = RetryPolicy(initial_delay="2s", backoff_factor=3, max_delay="1m", jitter=0.25)
    rng = random.Random(7)
    for failures in range(1, 6):
        low, high = policy.bounds_after(failures)
        samples = [policy.delay_after(failures, rng.random) for _ in range(500)]
        assert all(low <= s <= high for s in samples)
        assert max(samples) - min(samples) > (high - low) * 0.5, "jitter does not spread"
    assert policy.bounds_after(1) == (1.5, 2.5)


def test_jitter_never_exceeds_max_delay() -> None:
    policy = RetryPolicy(initial_delay="50s", max_delay="60s", jitter=1.0)
    assert policy.bounds_after(3)[1] == 60


def test_attempt_budget() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert [policy.allows_another(n) for n in (1, 2, 3)] == [True, True, False]
    assert not RetryPolicy(max_attempts=1).allows_another(1)


@pytest.mark.parametrize(
    "bad",
    [{"max_attempts": 0}, {"jitter": 2}, {"backoff_factor": 0.5}, {"initial_delay": "soon"}, {"retries": 3}],
)
def test_invalid_policies(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RetryPolicy.model_validate(bad)


def test_a_retry_waits_what_the_failed_call_was_asked_to_within_the_cap() -> None:
    policy = RetryPolicy(initial_delay=timedelta(milliseconds=100), jitter=0, max_delay=timedelta(seconds=30))
    assert policy.delay_honouring(1, lambda: 0.5) == 0.1
    assert policy.delay_honouring(1, lambda: 0.5, 4.0) == 4.0
    assert policy.delay_honouring(1, lambda: 0.5, 0.01) == 0.1, "never shorter than the policy"
    assert policy.delay_honouring(1, lambda: 0.5, 3600) == 30.0, "never past max_delay"
    assert policy.delay_honouring(1, lambda: 0.5, "soon") == 0.1
    assert policy.delay_honouring(1, lambda: 0.5, True) == 0.1
