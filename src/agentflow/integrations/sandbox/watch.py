"""Start a sandboxed process and watch it: feed its stdin, read its stdout and stderr within
their limits, and kill its whole process group at the time limit, when an output passes its
limit, when the step is cancelled, and once it ended (whatever it left behind goes too)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from typing import Any

from agentflow.core.frozen import frozen
from agentflow.integrations.sandbox.outcome import LOG_TAIL_CHARS, CodeLimits, Ending

DRAIN_SECONDS = 1.0
"""How long the output may take to arrive once the process group is dead (it is in the pipes)."""
_CHUNK = 65536


class _Protocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Says when the process exited: ``Process.wait()`` also waits for its pipes to close,
    which a process it started may keep open."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=_CHUNK, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


@frozen
class Started:
    """A started process and the event set when it exits."""

    transport: asyncio.SubprocessTransport
    process: asyncio.subprocess.Process
    exited: asyncio.Event


async def start(argv: list[str], options: dict[str, Any]) -> Started:
    """Start ``argv`` with pipes on stdin, stdout and stderr (``options``: ``subprocess`` keywords)."""
    loop = asyncio.get_running_loop()
    pipe = asyncio.subprocess.PIPE
    transport, protocol = await loop.subprocess_exec(
        lambda: _Protocol(loop), *argv, stdin=pipe, stdout=pipe, stderr=pipe, **options
    )
    return Started(transport, asyncio.subprocess.Process(transport, protocol, loop), protocol.exited)


def read_status(fd: int) -> list[dict[str, Any]]:
    """The launcher's status lines. Read once the launcher ended, when every writer has closed
    the pipe (at exec, or by dying), so what it wrote is all in the pipe's buffer."""
    os.set_blocking(fd, False)
    data = bytearray()
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, _CHUNK):
            data += chunk
    found: list[dict[str, Any]] = []
    for line in data.splitlines():
        with contextlib.suppress(ValueError):
            item = json.loads(line)
            if isinstance(item, dict):
                found.append(item)
    return found


class Watch:
    """One running process, in a session of its own (its process group is killed as one).

    Args:
        started: the process.
        status_fd: the read end of the launcher's status pipe (the caller closes it).
        limits: the time limit and the output limits.
    """

    def __init__(self, started: Started, status_fd: int, limits: CodeLimits) -> None:
        self.proc = started.process
        self.exited = started.exited
        self.status_fd = status_fd
        self.limits = limits
        self.stdout = bytearray()
        self.log = bytearray()
        self.overflow: str | None = None
        self.timed_out = False
        self.status: list[dict[str, Any]] = []
        self._over = asyncio.Event()
        self._began = time.monotonic()

    async def watch(self, stdin: bytes) -> Ending:
        """Until the process ends, passes a limit, or this task is cancelled (then its group is
        killed before the cancellation goes on)."""
        proc, limits = self.proc, self.limits
        assert proc.stdout is not None
        assert proc.stderr is not None
        readers = [
            asyncio.ensure_future(self._read(proc.stdout, self.stdout, limits.max_output_bytes, "stdout")),
            asyncio.ensure_future(self._read(proc.stderr, self.log, limits.max_log_bytes, "stderr")),
        ]
        feeding = asyncio.ensure_future(self._feed(stdin))
        ended = asyncio.ensure_future(self.exited.wait())
        over = asyncio.ensure_future(self._over.wait())
        try:
            done, _ = await asyncio.wait({ended, over}, timeout=limits.timeout, return_when="FIRST_COMPLETED")
            self.timed_out = not done
            self._kill()  # what it started and left behind goes with it, pipes closed or not
            await ended
            await asyncio.wait(readers, timeout=DRAIN_SECONDS)
            self.status = read_status(self.status_fd)
        finally:
            if proc.returncode is None:  # cancelled: the step's timeout, a stopping worker
                self._kill()
            for task in (*readers, feeding, ended, over):
                task.cancel()
        return Ending(
            proc.returncode, self.status, bytes(self.stdout), bytes(self.log), self.overflow,
            self.timed_out, time.monotonic() - self._began,
        )  # fmt: skip

    async def _feed(self, stdin: bytes) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it stopped reading
            self.proc.stdin.write(stdin)
            await self.proc.stdin.drain()
            self.proc.stdin.close()

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    async def _read(self, stream: asyncio.StreamReader, into: bytearray, limit: int, name: str) -> None:
        total = 0
        while chunk := await stream.read(_CHUNK):
            total += len(chunk)
            if total > limit:
                self.overflow = self.overflow or name
                self._over.set()
                self._kill()
                return
            into += chunk
            if name == "stderr" and len(into) > 8 * LOG_TAIL_CHARS:
                del into[: -4 * LOG_TAIL_CHARS]  # only the end is kept
