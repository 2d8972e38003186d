"""Run a code step's code in a confined subprocess and say how it ended.

``CodeSandbox.run`` starts the launcher (``agentflow.integrations.sandbox.launcher``) with an
empty environment in a session of its own, writes ``{"code", "input"}`` on its stdin and
watches it (``agentflow.integrations.sandbox.watch``). The launcher confines itself before the
code's interpreter starts, in the strongest tier this machine allows, found once by a trial
run. The verdict is data (``Outcome``); the ``run_code`` node turns it into a step error code.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentflow.integrations.sandbox import harness
from agentflow.integrations.sandbox.cgroups import (
    EXTRA_TASKS,
    HEADROOM_BYTES,
    ExecutionGroup,
    usable_hierarchy,
)
from agentflow.integrations.sandbox.outcome import (
    CodeLimits,
    Ending,
    Language,
    MiB,
    Outcome,
    Tier,
    Verdict,
    judge,
)
from agentflow.integrations.sandbox.watch import Watch, start

logger = logging.getLogger(__name__)

MAX_INPUT_BYTES = 8 * MiB
"""The most ``{"code", "input"}`` may take as JSON."""
SYSTEM_PATHS = (
    "/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/etc/ld.so.cache",
    "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/ssl/openssl.cnf",
)  # fmt: skip
"""What every interpreter may read: system programs and libraries, the loader's cache, the
time zone, OpenSSL's configuration (Node.js reads it at start)."""
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
_BOOT = (
    "import sys, types\n"
    "for n in ('agentflow', 'agentflow.integrations', 'agentflow.integrations.sandbox'):\n"
    "    sys.modules[n] = types.ModuleType(n)\n"
    "sys.modules['agentflow.integrations.sandbox'].__path__ = [sys.argv[1]]\n"
    "from agentflow.integrations.sandbox.launcher import main\n"
    "main(sys.argv[2])\n"
)
"""Starts the launcher with the standard library alone: the package's parents are stubs, so
importing it runs none of agentflow (nor needs its dependencies)."""


def base_python() -> str:
    """The worker's own interpreter outside any virtual environment."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def install_prefix(executable: str) -> str:
    """The directory an interpreter is installed under (``/usr`` for ``/usr/bin/node``): its
    libraries and standard library live there."""
    folder = os.path.dirname(os.path.realpath(executable))
    return os.path.dirname(folder) if os.path.basename(folder) == "bin" else folder


class CodeSandbox:
    """Runs code under the strongest confinement this machine allows.

    Args:
        require_namespaces: refuse to run (``Verdict.UNAVAILABLE``) unless the ``namespaces``
            tier works here, instead of falling back to ``basic``.
        python: the interpreter of Python code, a path or a name on PATH (default: the worker's
            own, outside its virtual environment).
        node: the Node.js binary of JavaScript code, a path or a name on PATH (default: ``node``).
        tier: use this tier instead of the strongest a trial run finds (``basic`` where
            namespaces work: tests, or a machine whose namespaces misbehave).
        cgroups: give each execution a control group where this worker may make one
            (``cgroups``: Linux, as root); False: resource limits per process only.
    """

    def __init__(
        self,
        *,
        require_namespaces: bool = False,
        python: str | None = None,
        node: str | None = None,
        tier: Tier | None = None,
        cgroups: bool = True,
    ) -> None:
        self.require_namespaces = require_namespaces
        self._groups = usable_hierarchy() if cgroups and sys.platform == "linux" else None
        self._interpreters = {"python": python or base_python(), "javascript": node or "node"}
        self._tier: tuple[Tier | None, str] | None = None if tier is None else (tier, f"{tier} as configured")
        self._probing = asyncio.Lock()

    def interpreter(self, language: Language) -> str | None:
        """The executable that runs ``language`` (a name is looked up on PATH; links resolved,
        as the private root holds only real paths), or None when this machine has none."""
        found = shutil.which(self._interpreters[language])
        return os.path.realpath(found) if found else None

    async def tier(self) -> tuple[Tier | None, str]:
        """The tier this machine allows (None: none) and why, found once by a trial run."""
        async with self._probing:
            if self._tier is None:
                self._tier = await self._probe()
            return self._tier

    async def _probe(self) -> tuple[Tier | None, str]:
        try:
            import resource  # noqa: F401  # resource limits are the floor: without them, no sandbox
        except ImportError:
            return None, f"{sys.platform} has no POSIX resource limits"
        if sys.platform != "linux":
            return "basic", f"{sys.platform} has no namespaces"
        trial = [base_python(), "-I", "-S", "-c", "pass"]
        outcome = await self._execute(trial, b"", CodeLimits(), "namespaces", expect_result=False)
        if outcome.verdict is Verdict.SETUP_FAILED and "cgroup.procs" in (outcome.detail or ""):
            self._groups = None  # the launcher could not join a group here: go on without
            outcome = await self._execute(trial, b"", CodeLimits(), "namespaces", expect_result=False)
        if outcome.verdict is Verdict.OK and outcome.isolation.get("tier") == "namespaces":
            return "namespaces", "this worker can create namespaces"
        why = outcome.detail if outcome.verdict is Verdict.SETUP_FAILED else outcome.log or outcome.detail
        return "basic", f"this worker cannot create namespaces ({why})"

    async def run(self, language: Language, code: str, value: Any, limits: CodeLimits) -> Outcome:
        """Run ``code``'s ``main(value)`` within ``limits``."""
        interpreter = self.interpreter(language)
        if interpreter is None:
            return Outcome(Verdict.NO_INTERPRETER, detail=f"this worker has no {language} interpreter")
        tier, why = await self.tier()
        if tier is None or (self.require_namespaces and tier != "namespaces"):
            return Outcome(Verdict.UNAVAILABLE, detail=why)
        stdin = json.dumps({"code": code, "input": value}, ensure_ascii=False).encode()
        if len(stdin) > MAX_INPUT_BYTES:
            return Outcome(Verdict.INPUT_TOO_LARGE, detail=f"{len(stdin):,} bytes")
        if language == "python":
            program = [interpreter, "-I", "-S", "-c", harness.PYTHON]
        else:  # V8 reserves address space it never uses; its heap is limited by its own flag
            heap = max(limits.memory_bytes // MiB, 16)
            program = [interpreter, f"--max-old-space-size={heap}", "-e", harness.JAVASCRIPT]
        return await self._execute(program, stdin, limits, tier)

    async def _execute(
        self, program: list[str], stdin: bytes, limits: CodeLimits, tier: Tier, *, expect_result: bool = True
    ) -> Outcome:
        workdir = tempfile.mkdtemp(prefix="agentflow-code-")
        status_read, status_write = os.pipe()
        spec = {
            "argv": program,
            "tier": tier,
            "workdir": workdir,
            "readable": [*SYSTEM_PATHS, install_prefix(program[0])],
            "devices": list(DEVICES),
            "status_fd": status_write,
            "limits": {
                "cpu_seconds": max(1, math.ceil(limits.timeout)),
                "memory_bytes": limits.memory_bytes,
                "file_bytes": limits.file_bytes,
                "processes": limits.processes,
                "open_files": limits.open_files,
                "tmp_bytes": limits.tmp_bytes,
            },
        }
        group = self._group_for(limits)
        if group is not None:
            spec["cgroup_procs"] = group.procs
        try:
            try:
                started = await start(*self._command(program, spec))
            except OSError as exc:  # no process to be had now (EAGAIN, EMFILE): worth another try
                return Outcome(Verdict.SETUP_FAILED, detail=f"the sandbox could not start: {exc}")
            finally:
                os.close(status_write)  # the launcher holds the only writer now
            try:
                ending: Ending = await Watch(started, status_read, limits).watch(stdin)
            finally:
                started.transport.close()
            if group is not None:
                ending = replace(ending, oom_killed=group.oom_killed())
        finally:
            os.close(status_read)
            if group is not None:  # what the code left running goes with it
                await asyncio.to_thread(group.close)
            await asyncio.to_thread(shutil.rmtree, workdir, True)
        return judge(ending, expect_result=expect_result)

    def _group_for(self, limits: CodeLimits) -> ExecutionGroup | None:
        """A control group for one execution, or None (none here, or the kernel refused one
        now: the resource limits still bound each process)."""
        if self._groups is None:
            return None
        try:
            return ExecutionGroup(
                self._groups,
                limits.memory_bytes + limits.tmp_bytes + HEADROOM_BYTES,
                limits.processes + EXTRA_TASKS,
            )
        except OSError as exc:
            logger.warning("code sandbox: no control group for this execution: %s", exc)
            return None

    def _command(self, program: list[str], spec: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
        """How to start the launcher for ``program``: no environment, a session of its own,
        the status pipe passed on."""
        package = str(Path(__file__).resolve().parent)
        argv = [base_python(), "-I", "-S", "-c", _BOOT, package, json.dumps(spec)]
        return argv, {"pass_fds": (spec["status_fd"],), "start_new_session": True, "env": {}, "cwd": "/"}
