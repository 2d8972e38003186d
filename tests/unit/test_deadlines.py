"""``runtime.deadlines.within``: a step's coroutine under its timeout, with no timer armed for
one that never suspends."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agentflow.cli.task_dump import describe_task
from agentflow.runtime import deadlines
from agentflow.runtime.deadlines import within


@pytest.fixture
def armed(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The deadlines ``within`` armed a timer for."""
    seen: list[float] = []
    real = asyncio.timeout_at

    def counting(when: float) -> Any:
        seen.append(when)
        return real(when)

    monkeypatch.setattr(deadlines.asyncio, "timeout_at", counting)
    return seen


async def test_a_coroutine_that_never_suspends_gives_its_value_without_a_timer(armed: list[float]) -> None:
    async def computes() -> int:
        return 42

    assert await within(computes(), 5.0) == 42
    assert armed == []


async def test_one_that_suspends_gets_a_timer_from_the_call_and_its_value(armed: list[float]) -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()

    async def waits() -> str:
        return (await future) + "!"

    before = loop.time()
    loop.call_later(0.01, future.set_result, "done")
    assert await within(waits(), 5.0) == "done!"
    assert len(armed) == 1 and before + 5.0 <= armed[0] <= loop.time() + 5.0


async def test_past_its_time_it_is_cancelled_and_timeout_error_raised() -> None:
    cancelled = asyncio.Event()

    async def sleeps() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    began = time.monotonic()
    with pytest.raises(TimeoutError):
        await within(sleeps(), 0.05)
    assert cancelled.is_set()
    assert time.monotonic() - began < 5


async def test_the_deadline_counts_from_the_call_not_from_the_first_suspension() -> None:
    async def computes_then_waits() -> str:
        time.sleep(0.1)  # a first step that spends the whole timeout computing
        await asyncio.sleep(0.2)
        return "late"

    with pytest.raises(TimeoutError):
        await within(computes_then_waits(), 0.05)


@pytest.mark.parametrize("suspends", [False, True])
async def test_its_exceptions_pass_whether_or_not_it_suspended(suspends: bool) -> None:
    async def fails() -> None:
        if suspends:
            await asyncio.sleep(0)
        raise ValueError("broken tool")

    with pytest.raises(ValueError, match="broken tool"):
        await within(fails(), 5.0)


async def test_a_tool_that_raises_timeout_error_itself_is_not_mistaken_for_the_deadline() -> None:
    async def times_out() -> None:
        await asyncio.sleep(0)
        raise TimeoutError("the tool's own")

    with pytest.raises(TimeoutError, match="the tool's own"):
        await within(times_out(), 5.0)


async def test_cancelling_the_caller_cancels_the_coroutine_and_it_may_clean_up() -> None:
    events: list[str] = []

    async def holds() -> None:
        try:
            await asyncio.sleep(30)
        finally:
            events.append("cleaned up")
            await asyncio.sleep(0)  # awaiting in its cleanup still works
            events.append("after cleanup")

    task = asyncio.create_task(within(holds(), 60.0))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert events == ["cleaned up", "after cleanup"]


async def test_a_coroutine_that_swallows_a_cancel_goes_on_to_its_value() -> None:
    async def stubborn() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)
            return "kept going"
        return "slept"

    task = asyncio.create_task(within(stubborn(), 60.0))
    await asyncio.sleep(0.01)
    task.cancel()
    assert await task == "kept going"


async def test_many_suspensions_each_get_their_value() -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()

    async def sums() -> int:
        total = 0
        for _ in range(5):
            total += await queue.get()
        return total

    async def feeds() -> None:
        for n in range(1, 6):
            await asyncio.sleep(0)
            queue.put_nowait(n)

    feeder = asyncio.create_task(feeds())
    assert await within(sums(), 5.0) == 15
    await feeder


def test_an_abandoned_wait_closes_the_coroutine() -> None:
    closed: list[bool] = []

    async def waits() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            closed.append(True)

    async def abandon() -> None:
        outer = within(waits(), 60.0)
        outer.send(None)  # runs to the first suspension, past the fast path
        outer.close()  # the task that awaited it is gone: GeneratorExit reaches the tool

    asyncio.run(abandon())
    assert closed == [True]


async def test_a_coroutine_that_answers_a_cancel_with_its_value_gives_that_value() -> None:
    async def gives_up() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "partial"
        return "slept"

    task = asyncio.create_task(within(gives_up(), 60.0))
    await asyncio.sleep(0.01)
    task.cancel()
    assert await task == "partial"


async def test_a_task_dump_follows_the_chain_into_the_coroutine_it_awaits() -> None:
    release = asyncio.Event()

    async def sleepy_tool() -> str:
        await release.wait()
        return "woke"

    task = asyncio.create_task(within(sleepy_tool(), 60.0), name="agentflow-run-test")
    await asyncio.sleep(0.01)
    lines = describe_task(task)
    assert lines[0] == "agentflow-run-test"
    assert any("within" in line for line in lines)
    assert any("sleepy_tool" in line for line in lines), lines
    assert any("Event.wait" in line for line in lines), lines
    assert lines[-1].startswith("    awaits <Future"), lines
    release.set()
    assert await task == "woke"
