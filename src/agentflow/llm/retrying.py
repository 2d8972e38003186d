"""Retries of a model call: exponential backoff that honours the vendor's ``Retry-After``.

One policy for every adapter (the SDKs' own retries are switched off) so that OpenAI,
Anthropic and Gemini back off the same way and the same tests prove it. Only failures that
may pass by waiting are retried here: rate limits, unavailable servers, connection errors and
timeouts. Everything else is raised at once for the caller (the step's retry policy) to judge.
"""

from __future__ import annotations

import abc
import asyncio
import email.utils
import logging
import math
import random
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from agentflow.core.retry import RetryPolicy
from agentflow.llm.base import ModelError

T = TypeVar("T")

log = logging.getLogger(__name__)

# A vendor asking for a longer pause than this is better served by failing the attempt (the
# error says how long to wait) so the durable engine can wait without holding a worker slot.
MAX_HONOURED_WAIT = 60.0

_RETRIED_CODES = frozenset({"model_rate_limited", "model_unavailable", "model_timeout"})
_BACKOFF = RetryPolicy(
    initial_delay=timedelta(seconds=0.5), backoff_factor=2.0, max_delay=timedelta(seconds=8), jitter=0.25
)


def retry_after_seconds(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """The wait a response asks for: ``retry-after-ms``, else ``Retry-After`` in seconds or as an HTTP date.

    Args:
        headers: the response headers (case-insensitive, as httpx gives them).
        now: the current time, for an HTTP date (default: the system clock).

    Returns:
        Seconds to wait (0 for a date in the past), or None when the response says nothing usable.
    """
    millis = _number(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return max(0.0, number) if math.isfinite(number) else None


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    max_retries: int,
    translate: Callable[[Exception], ModelError | None],
    provider: str,
) -> T:
    """Run ``attempt`` until it succeeds, fails for good, or ``max_retries`` retries are spent.

    Args:
        attempt: one call to the vendor.
        max_retries: retries after the first attempt (0: none).
        translate: turns a vendor exception into a ``ModelError``; None for an exception it does
            not know, which then propagates unchanged (a bug, not a vendor failure).
        provider: the adapter's name, for logs.

    Raises:
        ModelError: the last failure, with ``details['attempts']``.
    """
    failures = 0
    while True:
        try:
            return await attempt()
        except ModelError as exc:
            error, cause = exc, None
        except Exception as exc:
            translated = translate(exc)
            if translated is None:
                raise
            error, cause = translated, exc
        failures += 1
        delay = _delay_before_retry(error, failures) if failures <= max_retries else None
        if delay is None:
            error.details["attempts"] = failures
            raise error from cause
        log.info("%s: %s; retrying in %.2f s (retry %d of %d)", provider, error, delay, failures, max_retries)
        await asyncio.sleep(delay)


def _delay_before_retry(error: ModelError, failures: int) -> float | None:
    if error.code not in _RETRIED_CODES or not error.retryable:
        return None
    if error.retry_after is not None:
        return error.retry_after if error.retry_after <= MAX_HONOURED_WAIT else None
    return _BACKOFF.delay_after(failures, random.random)


class RetryingVendor(abc.ABC):
    """A vendor adapter whose every call goes through ``call_with_retries`` with its own
    translation of the SDK's exceptions."""

    name: str
    _max_retries: int

    @abc.abstractmethod
    def _translate(self, exc: Exception, model: str) -> ModelError | None:
        """The ``ModelError`` for an SDK exception (None: not the vendor's failure)."""

    async def _retrying(self, attempt: Callable[[], Awaitable[T]], model: str) -> T:
        """``attempt`` (one call about ``model``), retried as ``call_with_retries`` does."""
        return await call_with_retries(
            attempt,
            max_retries=self._max_retries,
            translate=lambda exc: self._translate(exc, model),
            provider=self.name,
        )
