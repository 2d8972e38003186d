"""Await a step's coroutine within its timeout, arming no timer when it never suspends.

``asyncio.timeout`` arms and cancels a timer on the loop each time: about 14 µs under uvloop,
a third of a trivial step's execution (benchmarks/README.md, "A step without a timer or a
context it does not read"). A timeout can only act where a coroutine suspends, so one that
finishes at its first step (a tool that computes and returns) needs none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from types import FrameType
from typing import Any, Generic, TypeVar

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
        return await _Resumed(coro, suspended_on)


class _Resumed(Generic[T]):
    """``coro``, whose first step ran and suspended on ``suspended_on``, awaited from there on
    as ``await coro`` would: the first value goes up to the task, then each value sent and each
    exception thrown (a cancellation) is passed on to ``coro``. It shows ``coro``'s frame and
    what ``coro`` awaits (``cr_frame``, ``cr_await``), so that a task dump
    (``agentflow.cli.task_dump``) still follows the chain down to the node's code."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, T], suspended_on: Any) -> None:
        self._coro = coro
        self._first: list[Any] = [suspended_on]  # emptied once the task has it

    def __await__(self) -> Generator[Any, Any, T]:
        return self  # type: ignore[return-value]  # an iterator with send, throw and close

    def __next__(self) -> Any:
        return self.send(None)

    def send(self, value: Any) -> Any:
        if self._first:
            return self._first.pop()
        return self._coro.send(value)  # its StopIteration carries the result up

    def throw(self, *exc: Any) -> Any:
        self._first.clear()
        return self._coro.throw(*exc)

    def close(self) -> None:
        self._coro.close()

    @property
    def cr_frame(self) -> FrameType | None:
        return self._coro.cr_frame  # type: ignore[attr-defined, no-any-return]

    @property
    def cr_await(self) -> Any:
        return self._coro.cr_await  # type: ignore[attr-defined]
