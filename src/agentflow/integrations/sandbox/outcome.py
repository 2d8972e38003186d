"""What a code execution may use, and how it ended: limits, verdicts and the rules between
an exit status and a verdict."""

from __future__ import annotations

import json
import signal
from dataclasses import field
from enum import StrEnum
from typing import Any, Literal

from agentflow.core.frozen import frozen
from agentflow.integrations.sandbox import harness

Language = Literal["python", "javascript"]
Tier = Literal["namespaces", "basic"]
MiB = 1024 * 1024
LOG_TAIL_CHARS = 4000
_MEMORY_SIGNS = (
    "MemoryError", "heap out of memory", "Array buffer allocation failed", "Cannot allocate memory",
    "std::bad_alloc", "Fatal process out of memory",
)  # fmt: skip
"""What interpreters print when an allocation failed (Python's harness also exits with
``EXIT_MEMORY``; V8 aborts)."""


@frozen
class CodeLimits:
    """What one execution may use.

    Attributes:
        timeout: wall-clock seconds; CPU seconds are capped at the next whole second.
        memory_bytes: data memory of each process (RLIMIT_DATA: heap and private mappings);
            with a control group (``cgroups``), also of all of them together, plus ``tmp_bytes``
            and 64 MiB for the interpreters.
        max_output_bytes: the result's JSON on stdout.
        max_log_bytes: what the code prints (stderr).
        processes: processes and threads (RLIMIT_NPROC, counted for the sandbox's user alone;
            and the control group's task count).
        file_bytes: the largest file the code may write.
        open_files: file descriptors per process.
        tmp_bytes: the private ``/tmp`` in the ``namespaces`` tier.
    """

    timeout: float = 10.0
    memory_bytes: int = 256 * MiB
    max_output_bytes: int = MiB
    max_log_bytes: int = MiB
    processes: int = 16
    file_bytes: int = 16 * MiB
    open_files: int = 256
    tmp_bytes: int = 64 * MiB


class Verdict(StrEnum):
    """How an execution ended."""

    OK = "ok"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    OUTPUT_TOO_LARGE = "output_too_large"
    INPUT_TOO_LARGE = "input_too_large"
    FAILED = "failed"
    NOT_JSON = "not_json"
    NO_MAIN = "no_main"
    NO_INTERPRETER = "no_interpreter"
    UNAVAILABLE = "unavailable"
    SETUP_FAILED = "setup_failed"


@frozen
class Outcome:
    """What an execution gave.

    Attributes:
        verdict: how it ended.
        value: the JSON value ``main`` returned (``Verdict.OK``).
        log: the end of what the code printed, or what the harness said went wrong.
        detail: a fact for the message: the signal or exit status, the stream over its limit,
            why the sandbox is unavailable.
        isolation: what the launcher achieved (``tier``, ``uid``, ``landlock``, ``seccomp``).
        seconds: wall time from start to end.
    """

    verdict: Verdict
    value: Any = None
    log: str = ""
    detail: str | None = None
    isolation: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


@frozen
class Ending:
    """The facts a verdict is judged from, as the watch saw them.

    Attributes:
        returncode: the launcher's exit status (negative: killed by that signal).
        status: the launcher's status lines (``{"ready": ...}``, ``{"error": ...}``).
        stdout: the result's bytes.
        log: the end of stderr.
        overflow: the stream that passed its limit, if one did.
        timed_out: the wall clock ran out.
        seconds: wall time.
        oom_killed: the kernel killed one of its processes at its control group's memory limit.
    """

    returncode: int | None
    status: list[dict[str, Any]]
    stdout: bytes
    log: bytes
    overflow: str | None
    timed_out: bool
    seconds: float
    oom_killed: bool = False


def judge(ending: Ending, *, expect_result: bool = True) -> Outcome:
    """The verdict on an execution: the sandbox's own failures first, then the limits it
    passed, then how the code ended. ``expect_result=False``: exit status 0 is enough."""
    ready: dict[str, Any] = next((s["ready"] for s in ending.status if isinstance(s.get("ready"), dict)), {})
    problem = next((str(s["error"]) for s in ending.status if "error" in s), None)
    log = ending.log.decode("utf-8", "replace")[-LOG_TAIL_CHARS:]
    code = ending.returncode
    facts: dict[str, Any] = {"isolation": ready, "seconds": ending.seconds, "log": log}
    # The interpreter is missing, or out of reach of the sandbox's user.
    if problem is not None and code == harness.EXIT_CANNOT_RUN:
        return Outcome(Verdict.NO_INTERPRETER, detail=problem, **facts)
    if problem is not None and code == harness.EXIT_SETUP_FAILED:
        return Outcome(Verdict.SETUP_FAILED, detail=problem, **facts)
    if ending.overflow:
        return Outcome(Verdict.OUTPUT_TOO_LARGE, detail=ending.overflow, **facts)
    if ending.timed_out or code == -signal.SIGXCPU:
        return Outcome(Verdict.TIMEOUT, detail="wall clock" if ending.timed_out else "CPU time", **facts)
    if code == 0:
        return _result(ending.stdout, facts) if expect_result else Outcome(Verdict.OK, **facts)
    if code == harness.EXIT_MEMORY or ending.oom_killed or any(sign in log for sign in _MEMORY_SIGNS):
        return Outcome(Verdict.MEMORY, **facts)
    detail = (
        f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit status {code}"
    )
    verdict = {harness.EXIT_NOT_JSON: Verdict.NOT_JSON, harness.EXIT_NO_MAIN: Verdict.NO_MAIN}
    return Outcome(verdict.get(code or 0, Verdict.FAILED), detail=detail, **facts)


def _result(stdout: bytes, facts: dict[str, Any]) -> Outcome:
    if not stdout:
        return Outcome(Verdict.NOT_JSON, detail="the code ended before main returned", **facts)
    try:
        value = json.loads(stdout.decode("utf-8"))
    except ValueError as exc:  # the code wrote to the result's descriptor itself
        return Outcome(Verdict.NOT_JSON, detail=f"its output is not JSON: {exc}", **facts)
    return Outcome(Verdict.OK, value=value, **facts)
