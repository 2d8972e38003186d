"""Percentiles of latency samples."""

from __future__ import annotations

import math
from collections.abc import Sequence

from agentflow.core.frozen import frozen


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100) by linear interpolation between closest ranks.

    Raises:
        ValueError: ``values`` is empty.
    """
    if not values:
        raise ValueError("no samples")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@frozen
class Summary:
    """p50, p99, mean and max of a set of samples, in the samples' unit."""

    n: int
    p50: float
    p99: float
    mean: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        """Summarise ``values`` (at least one)."""
        return cls(
            n=len(values),
            p50=percentile(values, 50),
            p99=percentile(values, 99),
            mean=sum(values) / len(values),
            max=max(values),
        )

    def scaled(self, factor: float) -> Summary:
        """The same summary with every figure multiplied (e.g. seconds to milliseconds)."""
        return Summary(self.n, self.p50 * factor, self.p99 * factor, self.mean * factor, self.max * factor)
