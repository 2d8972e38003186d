"""``agentflow.cli.task_dump``: what each task awaits, as SIGUSR1 logs it."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading

import pytest

from agentflow.cli import task_dump


async def _innermost(gate: asyncio.Event) -> None:
    await gate.wait()


async def _outer(gate: asyncio.Event) -> None:
    await _innermost(gate)


async def test_a_task_is_described_down_its_await_chain() -> None:
    gate = asyncio.Event()
    task = asyncio.create_task(_outer(gate), name="agentflow-run-demo")
    await asyncio.sleep(0)  # suspended in _innermost now
    lines = task_dump.describe_task(task)
    gate.set()
    await task

    assert lines[0] == "agentflow-run-demo"
    functions = [line.split()[-1] for line in lines[1:] if not line.strip().startswith("awaits")]
    assert functions[:2] == ["_outer", "_innermost"]
    assert "Event.wait" in functions  # into asyncio's own coroutine
    assert lines[-1].strip().startswith("awaits <Future pending")
    assert all("tests/unit/test_task_dump.py:" in line for line in lines[1:3])


async def test_tasks_are_listed_by_name_and_a_finished_task_is_its_name_alone() -> None:
    done = asyncio.create_task(asyncio.sleep(0), name="b-done")
    await done
    gate = asyncio.Event()
    waiting = asyncio.create_task(_outer(gate), name="a-waiting")
    await asyncio.sleep(0)
    text = task_dump.describe_tasks([done, waiting])
    gate.set()
    await waiting

    assert text.index("a-waiting") < text.index("b-done")
    assert text.rstrip().endswith("b-done")


async def test_sigusr1_logs_every_task_of_the_loop(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    gate = asyncio.Event()
    task = asyncio.create_task(_outer(gate), name="agentflow-run-signalled")
    assert task_dump.install(loop, "a test")
    try:
        with caplog.at_level(logging.WARNING, logger="agentflow.tasks"):
            os.kill(os.getpid(), signal.SIGUSR1)
            for _ in range(100):
                await asyncio.sleep(0.01)
                if caplog.records:
                    break
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
        gate.set()
        await task

    [record] = caplog.records
    message = record.getMessage()
    assert message.startswith(f"tasks of a test (pid {os.getpid()}),")
    assert "agentflow-run-signalled\n" in message and "_innermost" in message


def test_outside_the_main_thread_nothing_is_installed() -> None:
    installed: list[bool] = []

    def other_thread() -> None:
        loop = asyncio.new_event_loop()
        try:
            installed.append(task_dump.install(loop, "elsewhere"))
        finally:
            loop.close()

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert installed == [False]
