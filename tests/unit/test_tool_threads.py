import asyncio
import threading
import time

import pytest

from agentflow.nodes.threads import ToolThreads


async def test_results_and_exceptions_come_back() -> None:
    threads = ToolThreads()
    assert await threads.call(lambda a, b: a + b, 2, b=3) == 5
    with pytest.raises(ZeroDivisionError):
        await threads.call(lambda: 1 / 0)
    assert threads.abandoned == 0


async def test_hung_calls_are_abandoned_without_blocking_others() -> None:
    threads = ToolThreads()
    release = threading.Event()
    for _ in range(5):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(threads.call(release.wait, 10), 0.05)
    assert threads.abandoned == 5
    started = time.monotonic()
    assert await threads.call(lambda: "still served") == "still served"
    assert time.monotonic() - started < 1
    release.set()
    for _ in range(100):
        if threads.abandoned == 0:
            break
        await asyncio.sleep(0.01)
    assert threads.abandoned == 0, "finished abandoned threads are no longer counted"
