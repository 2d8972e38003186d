"""Retry policy: how many attempts a step gets and how long to back off between them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentflow.core.durations import parse_duration


class RetryPolicy(BaseModel):
    """Exponential backoff with jitter.

    The delay before attempt ``n + 1`` (after ``n`` failures) is
    ``min(max_delay, initial_delay * backoff_factor ** (n - 1))``, then scaled by a
    random factor in ``[1 - jitter, 1 + jitter]`` and capped at ``max_delay`` again.

    Attributes:
        max_attempts: total attempts including the first; 1 means no retry.
        initial_delay: delay after the first failure.
        backoff_factor: growth of the delay per further failure.
        max_delay: upper bound of any delay.
        jitter: relative spread (0 to 1) that keeps retries of many runs apart.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int = Field(default=3, ge=1, le=100)
    initial_delay: timedelta = timedelta(seconds=1)
    backoff_factor: float = Field(default=2.0, ge=1.0, le=10.0)
    max_delay: timedelta = timedelta(minutes=5)
    jitter: float = Field(default=0.2, ge=0.0, le=1.0)

    @field_validator("initial_delay", "max_delay", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        return parse_duration(value)

    def delay_honouring(self, failures: int, rand: Callable[[], float], asked: object = None) -> float:
        """``delay_after``, or longer when the failed call was told to wait ``asked`` seconds
        (an HTTP ``Retry-After``), never past ``max_delay``."""
        delay = self.delay_after(failures, rand)
        if isinstance(asked, int | float) and not isinstance(asked, bool) and asked > delay:
            return min(float(asked), self.max_delay.total_seconds())
        return delay

    def delay_after(self, failures: int, rand: Callable[[], float]) -> float:
        """Seconds to wait after ``failures`` failed attempts (``failures >= 1``).

        Args:
            failures: failed attempts so far.
            rand: a source of uniform numbers in [0, 1); injected so tests are exact.
        """
        base = self.initial_delay.total_seconds() * self.backoff_factor ** max(0, failures - 1)
        cap = self.max_delay.total_seconds()
        base = min(base, cap)
        spread = 1.0 + self.jitter * (2.0 * rand() - 1.0)
        return max(0.0, min(cap, base * spread))

    def bounds_after(self, failures: int) -> tuple[float, float]:
        """The smallest and largest delay ``delay_after`` can return for ``failures``."""
        return (self.delay_after(failures, lambda: 0.0), self.delay_after(failures, lambda: 1.0))

    def allows_another(self, failures: int) -> bool:
        """Whether a step that failed ``failures`` times may be attempted again."""
        return failures < self.max_attempts
