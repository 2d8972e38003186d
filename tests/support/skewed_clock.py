"""A deliberately broken worker for negative controls: its claim compares timers with its own,
skewed clock instead of the database's.

A worker process imports this module (``agentflow worker --import tests.support.skewed_clock``).
It wraps ``agentflow.store.runs.claim`` so that, in the claim statement, a waiting run (a
timer) is due when ``due_at <= $N``, where ``$N`` is this process's wall clock plus
``AGENTFLOW_TEST_CLOCK_SKEW`` seconds: a worker whose clock runs fast fires timers early.
Leases are still compared with the database clock, so the control breaks timers only. Everything else about the claim (its other parameters, its result) is the
product's own; nothing in the product changes. The module refuses to load if the claim
statement no longer has the comparison it replaces.
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from agentflow.store import claims, runs

SKEW_ENV = "AGENTFLOW_TEST_CLOCK_SKEW"
_DATABASE_CLOCK = "due_at <= now()"
if _DATABASE_CLOCK not in claims._CLAIM:
    raise RuntimeError(f"the claim statement changed: {_DATABASE_CLOCK!r} not found; update this control")
_SKEW = timedelta(seconds=float(os.environ.get(SKEW_ENV, "3")))
# The claim, with code steps on or off, for every row limit a worker sends (powers of two).
_CLAIMS = {claims._claim_for(1 << n, telling=False, code=code) for n in range(11) for code in (True, False)}
_PRODUCT_CLAIM: Callable[..., Awaitable[Any]] = runs.claim


def skewed(sql: str) -> str:
    """``sql`` in which a waiting run is due by one more parameter (the worker's clock)."""
    number = 1 + max((int(n) for n in re.findall(r"\$(\d+)", sql)), default=0)
    by_worker_clock = f"(due_at <= now() OR (status = 'waiting' AND due_at <= ${number}::timestamptz))"
    return sql.replace(_DATABASE_CLOCK, by_worker_clock)


class _SkewedPool:
    """The worker's pool, except that the claim statement gets the worker's clock."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    async def fetch(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        if sql in _CLAIMS:
            return await self._pool.fetch(skewed(sql), *args, datetime.now(UTC) + _SKEW, **kwargs)
        return await self._pool.fetch(sql, *args, **kwargs)


async def skewed_claim(pool: Any, *args: Any, **kwargs: Any) -> Any:
    """``runs.claim``, but "due" by this process's clock plus the skew."""
    return await _PRODUCT_CLAIM(_SkewedPool(pool), *args, **kwargs)


runs.claim = skewed_claim
