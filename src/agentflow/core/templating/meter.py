"""What one render may spend, and the meter that counts it.

Workflow templates belong to tenants, so a render must never stall the process that runs
it: every operation that can build something big is checked *before* it runs (see
:mod:`.guards`), everything a render builds is charged to its meter, and the meter stops a
render that has used too much CPU. A render that runs where it must give way quickly (the
event loop: see :func:`deferring`) stops after a few milliseconds with
:class:`RenderDeferred`, so its caller can finish it on a thread.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from contextvars import ContextVar, Token

MAX_SIZE = 2_000_000
"""The largest value a template may build: characters of a string, or a container's items
and characters counted as it would be written out (so ``[s] * 100`` weighs 100 copies of s)."""

MAX_TOTAL = 20_000_000
"""What one render may build altogether, counted like ``MAX_SIZE``."""

MAX_INT_BITS = 10_000
"""The largest integer a template may compute (about 3,000 decimal digits)."""

MAX_WIDTH = 10_000
"""The largest width or precision in a format (``'%10000s'``, ``'{:>10000}'``)."""

MAX_TEMPLATE_CHARS = 100_000
"""The longest template text accepted."""

CPU_SECONDS = 0.25
"""The CPU time one render may use (its thread's, so a busy machine does not cut it short)."""

INLINE_SECONDS = 0.002
"""How long a deferring render runs before it gives way (wall time)."""

_CLOCK_EVERY = 16
"""Checks between clock reads: reading a thread's CPU clock is a system call."""

_SHARE_EVERY = 0.002
_SHARE_FOR = 0.0002
"""A courteous render pauses this long after this much CPU, so that the event loop's
thread gets the interpreter lock within milliseconds, not after a render's whole slice."""


class TemplateLimitError(Exception):
    """A template tried to use more than its limits allow (code ``template_limit``)."""


class RenderDeferred(Exception):
    """A deferring render ran past ``INLINE_SECONDS``: finish it where it may take longer.

    Rendering has no side effects, so the caller simply renders again on a thread.
    """


class Meter:
    """The spending of one render: CPU time, what it built, and its deadline to defer."""

    __slots__ = ("_checks", "_courteous", "_cpu_deadline", "_defer_at", "_shared_at", "charged")

    def __init__(self, defer: bool, courteous: bool = False) -> None:
        self.charged = 0
        self._checks = 0
        started = time.thread_time()
        self._cpu_deadline = started + CPU_SECONDS
        self._shared_at = started
        self._courteous = courteous
        self._defer_at = time.perf_counter() + INLINE_SECONDS if defer else None

    def tick(self) -> None:
        """Count one step of work; every few steps, look at the clocks.

        Raises:
            RenderDeferred: a deferring render ran past its inline time.
            TemplateLimitError: the render used its CPU time.
        """
        self._checks += 1
        if self._checks % _CLOCK_EVERY == 0:
            self.look_at_clocks()

    def look_at_clocks(self) -> None:
        """Stop the render when its time is up (see :meth:`tick`)."""
        if self._defer_at is not None and time.perf_counter() > self._defer_at:
            raise RenderDeferred()
        spent = time.thread_time()
        if spent > self._cpu_deadline:
            raise TemplateLimitError(f"the template used more than {CPU_SECONDS:g} s of CPU")
        if self._courteous and spent - self._shared_at > _SHARE_EVERY:
            time.sleep(_SHARE_FOR)
            self._shared_at = spent

    def charge(self, size: int) -> None:
        """Count something the render built, ``size`` counted like ``MAX_SIZE``.

        Raises:
            TemplateLimitError: the render built more than ``MAX_TOTAL`` altogether.
        """
        self.charged += size
        if self.charged > MAX_TOTAL:
            raise TemplateLimitError(
                f"the template built more than {MAX_TOTAL:,} characters and items in all"
            )
        if size > 10_000:
            self.look_at_clocks()
        else:
            self.tick()


_METER: ContextVar[Meter | None] = ContextVar("agentflow_template_meter", default=None)
_DEFERRING: ContextVar[bool] = ContextVar("agentflow_template_deferring", default=False)
_COURTEOUS: ContextVar[bool] = ContextVar("agentflow_template_courteous", default=False)


def current() -> Meter:
    """The meter of the render under way (a fresh one outside any, e.g. while compiling)."""
    meter = _METER.get()
    return meter if meter is not None else Meter(defer=False)


class _Flag:
    """Sets a context variable for the ``with`` block (a class: a generator-based context
    manager costs several times as much, and every render enters two)."""

    __slots__ = ("_token", "_value", "_var")

    def __init__(self, var: ContextVar[bool], value: bool) -> None:
        self._var, self._value = var, value
        self._token: Token[bool] | None = None

    def __enter__(self) -> None:
        self._token = self._var.set(self._value)

    def __exit__(self, *_: object) -> None:
        assert self._token is not None
        self._var.reset(self._token)


class _Metering:
    __slots__ = ("_token",)

    def __enter__(self) -> Meter:
        meter = Meter(defer=_DEFERRING.get(), courteous=_COURTEOUS.get())
        self._token = _METER.set(meter)
        return meter

    def __exit__(self, *_: object) -> None:
        _METER.reset(self._token)


def metering() -> AbstractContextManager[Meter]:
    """Give the render inside a meter of its own."""
    return _Metering()


def deferring() -> AbstractContextManager[None]:
    """Renders inside raise :class:`RenderDeferred` after ``INLINE_SECONDS`` instead of going on.

    Use it where a long render would block others (an event loop); on ``RenderDeferred``,
    render again on a thread.
    """
    return _Flag(_DEFERRING, True)


def courteous() -> AbstractContextManager[None]:
    """Renders inside pause now and then to let other threads run (for render threads)."""
    return _Flag(_COURTEOUS, True)


def deferrable() -> bool:
    """Whether renders here give way (inside :func:`deferring`)."""
    return _DEFERRING.get()
