"""A control group per code execution (Linux, a worker running as root): one memory limit and
one task count for every process of the sandbox together, and a kill that nothing escapes.

Resource limits (``launcher``) bound each process; a control group bounds their sum, so code
that starts ``processes`` children cannot use ``processes`` times the memory. The worker makes
the group before it starts the launcher, the launcher joins it first thing (before it forks
or changes user), and the worker kills what is left in it and removes it once the execution
has ended. It works on the unified hierarchy (cgroup v2) and on v1's ``memory`` and ``pids``
hierarchies; elsewhere executions run without one (``docs/security.md``, "Code steps").
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import uuid
from pathlib import Path

from agentflow.core.frozen import frozen

logger = logging.getLogger(__name__)

PARENT = "agentflow-code"
"""The directory under each hierarchy's root that holds the executions' groups."""
HEADROOM_BYTES = 64 * 1024 * 1024
"""Memory the group allows beyond the code's own limit and its ``/tmp`` (which a tmpfs charges
to the group): the interpreters' code and the page cache of what they read."""
EXTRA_TASKS = 2
"""The launcher and, in the ``namespaces`` tier, the PID 1 it forks run in the group too."""
_MOUNTS = "/proc/self/mounts"
_OWN = "/proc/self/cgroup"


@frozen
class Hierarchy:
    """Where groups are made: the v2 root, or v1's memory and pids roots."""

    unified: bool
    memory: Path
    pids: Path

    def roots(self) -> list[Path]:
        """The hierarchies' roots (one on v2)."""
        return [self.memory] if self.unified else [self.memory, self.pids]


def find_hierarchy(mounts: str = _MOUNTS, own: str = _OWN) -> Hierarchy | None:
    """The control groups this process may make for code, or None (not root, not Linux, no
    memory or pids controller). Groups go under the worker's own group in each hierarchy, so a
    sandbox stays inside whatever limits the worker itself runs under."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    try:
        mounted = [line.split() for line in Path(mounts).read_text().splitlines()]
        membership = [line.split(":", 2) for line in Path(own).read_text().splitlines()]
    except OSError:
        return None
    ours = {c: path for _, names, path in (m for m in membership if len(m) == 3) for c in names.split(",")}
    v1: dict[str, Path] = {}
    for fields in (f for f in mounted if len(f) >= 4):
        where, kind, options = Path(fields[1]), fields[2], fields[3].split(",")
        if kind == "cgroup2" and "" in ours:
            root = where / ours[""].lstrip("/")
            if _v2_ready(root):
                return Hierarchy(True, root, root)
        if kind == "cgroup":
            for controller in ("memory", "pids"):
                if controller in options and controller in ours:
                    v1.setdefault(controller, where / ours[controller].lstrip("/"))
    if "memory" in v1 and "pids" in v1:
        return Hierarchy(False, v1["memory"], v1["pids"])
    return None


def usable_hierarchy() -> Hierarchy | None:
    """``find_hierarchy``'s answer once a group was made and removed there (a container may
    show the files and refuse the writes), after removing what dead workers left."""
    found = find_hierarchy()
    if found is None:
        return None
    try:
        ExecutionGroup(found, HEADROOM_BYTES, EXTRA_TASKS).close()
    except OSError as exc:
        logger.info("code sandbox: no control groups (%s)", exc)
        return None
    remove_stale(found)
    return found


def _v2_ready(group: Path) -> bool:
    """Whether groups under ``group`` can have memory and pids limits. On v2 a group with
    processes of its own cannot hand controllers to children (EBUSY): the worker must run in a
    group whose parent delegates them (docs/security.md)."""
    try:
        offered = (group / "cgroup.controllers").read_text().split()
        if not {"memory", "pids"} <= set(offered):
            return False
        enabled = (group / "cgroup.subtree_control").read_text().split()
        if not {"memory", "pids"} <= set(enabled):
            (group / "cgroup.subtree_control").write_text("+memory +pids")
        return True
    except OSError:
        return False


class ExecutionGroup:
    """The control group of one execution: made with its limits, joined by the launcher
    (``procs``), then ``close``d."""

    def __init__(self, hierarchy: Hierarchy, memory_bytes: int, tasks: int) -> None:
        self.hierarchy = hierarchy
        name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"  # the worker's pid: see remove_stale
        self.paths = [root / PARENT / name for root in hierarchy.roots()]
        made: list[Path] = []
        try:
            for path in self.paths:
                path.parent.mkdir(exist_ok=True)
                path.mkdir()
                made.append(path)
            if hierarchy.unified:
                (self.paths[0] / "memory.max").write_text(str(memory_bytes))
                _try_write(self.paths[0] / "memory.swap.max", "0")
                (self.paths[0] / "pids.max").write_text(str(tasks))
            else:
                memory, pids = self.paths
                (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
                _try_write(memory / "memory.memsw.limit_in_bytes", str(memory_bytes))  # no swap either
                (pids / "pids.max").write_text(str(tasks))
        except OSError:
            for path in reversed(made):
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise

    @property
    def procs(self) -> list[str]:
        """The files the launcher writes its pid to, to join the group."""
        return [str(path / "cgroup.procs") for path in self.paths]

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the group for want of memory (v1 kernels
        before 4.13 do not count it: False)."""
        memory = self.paths[0]
        name = "memory.events" if self.hierarchy.unified else "memory.oom_control"
        try:
            for line in (memory / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value) > 0
        except (OSError, ValueError):
            return False
        return False

    def close(self, patience: float = 5.0) -> None:
        """Kill whatever still runs in the group, then remove it."""
        remove(self.paths, patience)


def remove(paths: list[Path], patience: float = 5.0) -> bool:
    """Kill every process in the groups at ``paths`` and remove them; False when one stayed
    (a process stuck in the kernel: it is removed by ``remove_stale`` later)."""
    deadline = time.monotonic() + patience
    for path in paths:
        while path.exists():
            for pid in _members(path):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            try:
                path.rmdir()
            except OSError:  # busy until the killed processes are reaped
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.01)
    return True


def remove_stale(hierarchy: Hierarchy) -> int:
    """Remove the groups a dead worker left (named after its pid); return how many went."""
    removed = 0
    for root in hierarchy.roots():
        for path in sorted((root / PARENT).glob("*-*")) if (root / PARENT).is_dir() else []:
            owner = path.name.split("-", 1)[0]
            if owner.isdigit() and not _alive(int(owner)) and remove([path], patience=1.0):
                removed += 1
    return removed


def _members(path: Path) -> list[int]:
    try:
        return [int(line) for line in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _try_write(path: Path, value: str) -> None:
    with contextlib.suppress(OSError):
        path.write_text(value)
