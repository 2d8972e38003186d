"""A uvicorn server for the API inside a program that owns its own signals and tasks."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Generator

import uvicorn


class ApiServer(uvicorn.Server):
    """``uvicorn.Server`` that leaves SIGINT/SIGTERM to its host program.

    uvicorn's own handlers stop only the HTTP server and re-raise the signal when it has
    stopped, which would kill the process before the worker sharing it has finished its
    steps. The host sets ``should_exit`` instead.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """Install nothing: the host program handles signals."""
        yield

    async def serve_until_started(
        self, sockets: list[socket.socket] | None = None, *, timeout: float = 30.0
    ) -> asyncio.Task[None]:
        """Start serving in a task; return it once the server listens.

        Raises:
            RuntimeError: the server stopped (e.g. the port was taken) or did not start in time.
        """
        task = asyncio.create_task(self._serve_or_fail(sockets), name="agentflow-api")
        deadline = asyncio.get_running_loop().time() + timeout
        while not self.started:
            if task.done():
                await task  # raises the start-up failure
                raise RuntimeError("the API server stopped before it started")
            if asyncio.get_running_loop().time() > deadline:
                self.should_exit = True
                raise RuntimeError("the API server did not start in time")
            await asyncio.sleep(0.02)
        return task

    async def _serve_or_fail(self, sockets: list[socket.socket] | None) -> None:
        try:
            await self.serve(sockets)
        except SystemExit as exc:  # uvicorn exits on start-up failures (port taken, ...)
            raise RuntimeError(f"the API server failed to start (exit {exc.code})") from None
