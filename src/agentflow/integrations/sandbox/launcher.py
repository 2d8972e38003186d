"""The first process of a code step's sandbox: it confines itself, then becomes the code's
interpreter.

The worker starts it as ``python -I -S -c BOOT <package dir> <spec>`` (see
``agentflow.integrations.sandbox.process``): a fresh interpreter with the standard library
only, an empty environment and a session of its own. It reads the spec (JSON), sets the
confinement up in the order the kernel needs, reports what it achieved on the status pipe,
and executes the program with an empty environment. Nothing here may import the rest of
agentflow.

Tiers (``spec["tier"]``):

- ``namespaces`` (Linux, when the kernel lets this user create them): new user (unless root),
  PID, network, mount, IPC and UTS namespaces. The code runs as PID 1 of its own PID
  namespace, in a root directory that holds only read-only system directories, its
  interpreter and a private size-limited ``/tmp``; its network namespace has no interface up.
  Killing PID 1 kills everything it started, wherever it moved.
- ``basic``: the code runs in the worker's filesystem and network namespace, in a private
  temporary directory; on Linux Landlock (where the kernel has it) confines its files, TCP
  and signals, and the seccomp filter its sockets and process calls.

Both tiers: no new privileges, a parent-death signal, the seccomp filter (Linux), a lower CPU
priority (nice 10), resource limits (CPU seconds, data memory, file size, processes, open
files, no core files), and, when the worker runs as root, a fresh unprivileged user id and
the execution's control group (``spec["cgroup_procs"]``, joined before anything else; see
``cgroups``).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import sys
from typing import Any

from agentflow.integrations.sandbox.harness import EXIT_CANNOT_RUN, EXIT_SETUP_FAILED

if sys.platform == "linux":
    from agentflow.integrations.sandbox import linux

_ROOT_SIZE = "size=4m,mode=0755"
"""The private root holds only mount points and symlinks."""


def main(spec_text: str) -> None:
    """Confine this process as ``spec_text`` says and execute its program; never returns."""
    spec: dict[str, Any] = json.loads(spec_text)
    status: int = spec["status_fd"]
    try:
        for procs in spec.get("cgroup_procs", []):  # first: everything after counts in the group
            with open(procs, "w") as handle:
                handle.write(str(os.getpid()))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sys.platform == "linux":
            linux.die_with_parent(signal.SIGKILL)  # the worker died: so does the code
        if spec["tier"] == "namespaces":
            _run_namespaced(spec, status)
        _confine_basic(spec, status)
    except Exception as exc:  # every setup failure is reported, then the process ends
        _report(status, {"error": f"{type(exc).__name__}: {exc}"})
        os._exit(EXIT_SETUP_FAILED)


def _report(status: int, document: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the worker stopped listening; the exit status still tells
        os.write(status, json.dumps(document).encode() + b"\n")


def fresh_id() -> int:
    """A user and group id no account uses (2^30 .. 2^31), so the code's processes are its own:
    the process limit counts only them and they can signal nothing else."""
    return (1 << 30) + int.from_bytes(os.urandom(4), "big") % ((1 << 30) - 2)


def _run_namespaced(spec: dict[str, Any], status: int) -> None:
    euid, egid = os.geteuid(), os.getegid()
    linux.unshare(linux.NAMESPACES | (0 if euid == 0 else linux.CLONE_NEWUSER))
    if euid != 0:
        linux.map_own_ids(euid, egid)
    child = os.fork()  # PID 1 of the new PID namespace
    if child == 0:
        try:
            _enter_private_root(spec, status, euid)
        except BaseException as exc:
            _report(status, {"error": f"{type(exc).__name__}: {exc}"})
            os._exit(EXIT_SETUP_FAILED)
    os.close(status)
    _, wait_status = os.waitpid(child, 0)
    if os.WIFSIGNALED(wait_status):  # end the same way, so the worker reads one status
        number = os.WTERMSIG(wait_status)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(os.waitstatus_to_exitcode(wait_status))


def _enter_private_root(spec: dict[str, Any], status: int, euid: int) -> None:
    os.umask(0o022)
    root: str = spec["workdir"]
    ident = fresh_id() if euid == 0 else euid
    group = ident if euid == 0 else os.getegid()
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)  # nothing below leaks out
    linux.mount("tmpfs", root, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, _ROOT_SIZE)
    for path in outermost(spec["readable"]):
        _place(root, path, devices=False)
    for path in spec["devices"]:
        _place(root, path, devices=True)
    os.mkdir(f"{root}/tmp")
    tmp = f"size={spec['limits']['tmp_bytes']},mode=0700,uid={ident},gid={group}"
    linux.mount("tmpfs", f"{root}/tmp", "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, tmp)
    os.mkdir(f"{root}/proc")
    try:  # this namespace's processes only; refused where the outer /proc has masked parts
        linux.mount("proc", f"{root}/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC)
        readable = [*spec["readable"], "/proc"]
    except OSError:
        readable = list(spec["readable"])
    linux.mount(
        None, root, None, linux.MS_REMOUNT | linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NODEV, _ROOT_SIZE
    )
    linux.pivot_into(root)
    linux.set_hostname("sandbox")
    os.chdir("/tmp")
    if euid == 0:
        _become(ident, group)
    report = {"tier": "namespaces", "uid": os.getuid(), "proc": "/proc" in readable}
    _confine(spec, status, report, readable=readable, writable=["/tmp"], signal_scope=True)


def outermost(paths: list[str]) -> list[str]:
    """``paths`` without those inside another of them (a bind inside a read-only bind cannot
    be made)."""
    kept: list[str] = []
    for path in sorted(set(paths), key=len):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def _place(root: str, path: str, *, devices: bool) -> None:
    target = root + path
    if os.path.islink(path):  # /bin -> usr/bin: the same link, which resolves inside the new root
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.symlink(os.readlink(path), target)
    elif os.path.isdir(path):
        os.makedirs(target, exist_ok=True)
        linux.bind_read_only(path, target, devices=devices)
    elif os.path.exists(path):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "a"):
            pass
        linux.bind_read_only(path, target, devices=devices)


def _become(uid: int, gid: int) -> None:
    os.setgroups([])
    if hasattr(os, "setresuid"):  # real, effective and saved ids at once (Linux, BSDs)
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    else:  # macOS: as root, setgid/setuid set all three
        os.setgid(gid)
        os.setuid(uid)


def _confine_basic(spec: dict[str, Any], status: int) -> None:
    workdir: str = spec["workdir"]
    report: dict[str, Any] = {"tier": "basic"}
    shared_user = os.geteuid() != 0  # the worker's own user: its other processes count too
    if not shared_user:
        ident = fresh_id()
        os.chown(workdir, ident, ident)
        _become(ident, ident)
    os.chdir(workdir)
    report["uid"] = os.getuid()
    _confine(
        spec, status, report, readable=list(spec["readable"]), writable=[workdir], signal_scope=False,
        shared_user=shared_user,
    )  # fmt: skip


def _confine(
    spec: dict[str, Any],
    status: int,
    report: dict[str, Any],
    *,
    readable: list[str],
    writable: list[str],
    signal_scope: bool,
    shared_user: bool = False,
) -> None:
    """The steps both tiers share, in order: parent-death signal (after any change of user,
    which clears it), no new privileges, Landlock, seccomp, resource limits; then exec."""
    limits: dict[str, int] = spec["limits"]
    report["cgroup"] = bool(spec.get("cgroup_procs"))
    processes = limits["processes"]
    if shared_user and sys.platform == "linux":
        processes += _tasks_of(os.getuid())  # the limit counts every task of this user
    if sys.platform == "linux":
        linux.die_with_parent(signal.SIGKILL)
        linux.no_new_privileges()
        abi = linux.landlock_abi()
        if abi:
            linux.restrict_paths(abi, readable, writable, spec["devices"])
        report["landlock"] = abi
        # Without a PID namespace or Landlock's signal scope, signals go to itself and its group only.
        own_pid = None if signal_scope or abi >= 6 else os.getpid()
        if linux.seccomp_supported():
            linux.install_seccomp(own_pid)
        report["seccomp"] = linux.seccomp_supported()
    with contextlib.suppress(OSError):  # a busy sandbox yields the CPU to the worker first
        os.nice(10)
    cpu = limits["cpu_seconds"]
    for kind, value in (
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_DATA, (limits["memory_bytes"],) * 2),
        (resource.RLIMIT_FSIZE, (limits["file_bytes"],) * 2),
        (resource.RLIMIT_NPROC, (processes,) * 2),
        (resource.RLIMIT_NOFILE, (limits["open_files"],) * 2),
    ):
        resource.setrlimit(kind, value)
    _report(status, {"ready": report})
    os.set_inheritable(status, False)  # closed by exec: the worker sees the pipe end
    argv: list[str] = spec["argv"]
    try:
        os.execve(argv[0], argv, {})
    except OSError as exc:
        _report(status, {"error": f"cannot run {argv[0]}: {exc.strerror}"})
        os._exit(EXIT_CANNOT_RUN)


def _tasks_of(uid: int) -> int:
    """Tasks (threads) of ``uid`` now, read from /proc; RLIMIT_NPROC counts them all."""
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            continue  # gone, or not ours to read
        if int(fields.get("Uid", "-1 ").split()[0]) == uid:
            count += int(fields.get("Threads", "1"))
    return count
