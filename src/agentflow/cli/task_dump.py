"""What every task of a running process awaits, logged on SIGUSR1 (``kill -USR1 <pid>``).

A worker whose run seems stuck holds its lease while its heartbeat runs, so no other worker
takes the run: the question is what the run's driver is waiting for. Python prints a thread's
stack (``faulthandler``) but not the await chain of an asyncio task, which is where a worker's
time is. ``agentflow worker`` and ``agentflow serve`` install ``install`` at start: on SIGUSR1
they log, for each task (a run's driver is named ``agentflow-run-<run id>``), the coroutines
it is suspended in, outermost first, down to what the innermost awaits. Nothing stops or
changes; the dump is one log record.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Iterable
from types import CodeType
from typing import Any

logger = logging.getLogger("agentflow.tasks")

MAX_DEPTH = 60
"""Coroutines followed down one task's chain at most (a recursion would never end)."""


def describe_task(task: asyncio.Task[Any]) -> list[str]:
    """``task``'s name, then one line per coroutine it is suspended in (``path:line function``,
    outermost first), then what the innermost awaits when that is not a coroutine."""
    lines = [task.get_name()]
    awaited: Any = task.get_coro()
    for _ in range(MAX_DEPTH):
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is None:
            break
        lines.append(f"    {_where(frame.f_code, frame.f_lineno)}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    if awaited is not None and not hasattr(awaited, "cr_frame"):
        # A future's await iterator does not say which future; the task does (a private but
        # long-standing attribute of both of asyncio's Task implementations).
        waiter = getattr(task, "_fut_waiter", None)
        lines.append(f"    awaits {_short(repr(waiter if waiter is not None else awaited))}")
    return lines


def describe_tasks(tasks: Iterable[asyncio.Task[Any]]) -> str:
    """Every task of ``tasks`` described (``describe_task``), sorted by name."""
    described = sorted((describe_task(t) for t in tasks), key=lambda lines: lines[0])
    return "\n".join(line for lines in described for line in lines)


def install(loop: asyncio.AbstractEventLoop, process: str) -> bool:
    """Log every task of ``loop`` on SIGUSR1; False where signals cannot be handled (not the
    main thread, or no SIGUSR1 on this platform)."""
    usr1 = getattr(signal, "SIGUSR1", None)
    if usr1 is None:
        return False

    def dump() -> None:
        tasks = asyncio.all_tasks(loop)
        logger.warning(
            "tasks of %s (pid %d), %d at SIGUSR1:\n%s",
            process,
            os.getpid(),
            len(tasks),
            describe_tasks(tasks),
        )

    try:
        loop.add_signal_handler(usr1, dump)
    except (RuntimeError, ValueError, NotImplementedError):  # not the main thread, or no such support
        return False
    return True


def _where(code: CodeType, line: int | None) -> str:
    # The last three parts of the path: enough to find the file, short enough to read.
    path = "/".join(code.co_filename.replace(os.sep, "/").split("/")[-3:])
    return f"{path}:{line} {code.co_qualname}"


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
