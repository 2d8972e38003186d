"""Await a step's coroutine within its timeout, arming no timer when it never suspends.

``asyncio.timeout`` arms and cancels a timer on the loop each time: about 14 µs under uvloop,
a third of a trivial step's execution (benchmarks/README.md, "A step without a timer or a
context it does not read"). A timeout can only act where a coroutine suspends, so one that
finishes at its first step (a tool that computes and returns) needs none.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


async def within(coro: Coroutine[Any, Any, T], seconds: float) -> T:
    """``await coro``, cancelled when it has not finished ``seconds`` after this call.

    As ``async with asyncio.timeout(seconds): await coro``: the deadline counts from now, so a
    first step that spends the whole time computing is cancelled at its first suspension.

    Raises:
        TimeoutError: ``coro`` was cancelled at the deadline.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    try:
        suspended_on = coro.send(None)
    except StopIteration as finished:
        return finished.value  # type: ignore[no-any-return]
    async with asyncio.timeout_at(deadline):
        return await _resumed(coro, suspended_on)


@types.coroutine
def _resumed(coro: Coroutine[Any, Any, T], suspended_on: Any) -> Generator[Any, Any, T]:
    """Go on awaiting ``coro``, whose first step ran and suspended on ``suspended_on``: what
    ``await coro`` does from there, each value sent and each exception thrown (a
    cancellation) passed on to it."""
    while True:
        try:
            sent = yield suspended_on
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                suspended_on = coro.throw(exc)
            except StopIteration as finished:
                return finished.value  # type: ignore[no-any-return]
            continue
        try:
            suspended_on = coro.send(sent)
        except StopIteration as finished:
            return finished.value  # type: ignore[no-any-return]
