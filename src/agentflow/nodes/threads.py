"""Threads for sync tools: one per call, so a tool that hangs never blocks another.

Python cannot stop a thread. A sync tool that outlives its step's timeout keeps running on
its own (daemon) thread until it returns or the process exits; its result is dropped. With a
fixed pool, enough such tools would starve every later sync step; with a thread per call
they cost only that thread. ``abandoned`` counts them so operators can see the leak.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class ToolThreads:
    """Runs blocking functions on fresh daemon threads and awaits them."""

    def __init__(self) -> None:
        self._abandoned = 0
        self._lock = threading.Lock()

    @property
    def abandoned(self) -> int:
        """Threads still running a call whose caller gave up (timed out or cancelled)."""
        return self._abandoned

    async def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` on a new thread; cancelling the await abandons it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        state = {"finished": False, "given_up": False}  # guarded by self._lock

        def settle(ok: bool, value: Any) -> None:
            if not future.done():
                future.set_result(value) if ok else future.set_exception(value)

        def target() -> None:
            try:
                outcome: tuple[bool, Any] = (True, fn(*args, **kwargs))
            except BaseException as exc:  # handed to the awaiting step as its failure
                outcome = (False, exc)
            with self._lock:
                state["finished"] = True
                if state["given_up"]:
                    self._abandoned -= 1
                    return
            loop.call_soon_threadsafe(settle, *outcome)

        name = f"agentflow-tool-{getattr(fn, '__name__', 'call')}"
        threading.Thread(target=target, name=name, daemon=True).start()
        try:
            return await future
        except asyncio.CancelledError:
            with self._lock:
                if not state["finished"]:
                    state["given_up"] = True
                    self._abandoned += 1
            logger.warning("sync tool %s outlived its step (%d threads abandoned)", name, self._abandoned)
            raise
