"""Linux facilities of the code sandbox, through ctypes: namespaces, a private root, a seccomp
filter and Landlock.

Standard library only: the launcher imports this module in a fresh ``python -I -S`` before the
code runs (see ``agentflow.integrations.sandbox.launcher``), where no package is installed.
Every function raises ``OSError`` when the kernel refuses, so the launcher can say what failed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from collections.abc import Iterable

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACES = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET
"""Everything but the user namespace, which only an unprivileged launcher needs."""

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 32, 1024, 2048, 4096, 16384
MS_PRIVATE, MS_RELATIME = 1 << 18, 1 << 21
MNT_DETACH = 2
_KEPT_FLAGS = (  # a bind mount's flags that a read-only remount must repeat (locked in a user namespace)
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (os.ST_RELATIME, MS_RELATIME),
)

PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 1, 22, 38
SECCOMP_MODE_FILTER = 2
_RET_ALLOW, _RET_ERRNO, _RET_KILL = 0x7FFF0000, 0x00050000, 0x80000000
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (the low half of arg 0 on little-endian)

_ARCHES = {
    # machine: (AUDIT_ARCH, x32 bit or 0, pivot_root, syscall numbers)
    "x86_64": (0xC000003E, 0x40000000, 155, {
        "socket": 41, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "bpf": 321,
        "perf_event_open": 298, "keyctl": 250, "add_key": 248, "request_key": 249, "userfaultfd": 323,
        "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
        "name_to_handle_at": 303, "open_by_handle_at": 304, "kexec_load": 246, "init_module": 175,
        "finit_module": 313, "delete_module": 176, "setsid": 112, "setpgid": 109, "swapon": 167,
        "swapoff": 168, "reboot": 169, "acct": 163, "clone": 56, "kill": 62, "tkill": 200,
        "tgkill": 234,
    }),
    "aarch64": (0xC00000B7, 0, 41, {
        "socket": 198, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "bpf": 280,
        "perf_event_open": 241, "keyctl": 219, "add_key": 217, "request_key": 218, "userfaultfd": 282,
        "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268,
        "name_to_handle_at": 264, "open_by_handle_at": 265, "kexec_load": 104, "init_module": 105,
        "finit_module": 273, "delete_module": 106, "setsid": 157, "setpgid": 154, "swapon": 224,
        "swapoff": 225, "reboot": 142, "acct": 89, "clone": 220, "kill": 129, "tkill": 130,
        "tgkill": 131,
    }),
}  # fmt: skip
_COMMON_SYSCALLS = {  # numbered alike on every architecture (added after the tables were unified)
    "pidfd_send_signal": 424, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "pidfd_open": 434, "clone3": 435, "pidfd_getfd": 438, "mount_setattr": 442,
}  # fmt: skip
_DENIED = (  # reach other processes or the kernel's rarer surfaces, or leave the sandbox's group
    "ptrace", "process_vm_readv", "process_vm_writev", "bpf", "perf_event_open", "keyctl", "add_key",
    "request_key", "userfaultfd", "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "name_to_handle_at", "open_by_handle_at", "kexec_load", "init_module", "finit_module",
    "delete_module", "setsid", "setpgid", "swapon", "swapoff", "reboot", "acct", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount",
    "fspick", "pidfd_getfd", "mount_setattr",
)  # fmt: skip
_SIGNALLING = ("kill", "tkill", "tgkill", "pidfd_open")
"""Calls whose first argument is a process: limited to the caller and its group when nothing
else (a PID namespace, Landlock's signal scope) keeps the code from the worker."""

_LANDLOCK_CREATE, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT = 444, 445, 446
LL_EXECUTE, LL_WRITE_FILE, LL_READ_FILE, LL_READ_DIR = 1, 2, 4, 8
LL_TRUNCATE, LL_IOCTL_DEV = 1 << 14, 1 << 15
LL_READ = LL_EXECUTE | LL_READ_FILE | LL_READ_DIR
_LL_NET_TCP = 0b11  # bind and connect
_LL_SCOPES = 0b11  # abstract UNIX sockets and signals outside the sandbox

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _SockFilter(ctypes.Structure):
    _fields_ = (
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint32),
    )


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter)))


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def _path(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def unshare(flags: int) -> None:
    """Move the calling process into new namespaces (``CLONE_NEW*`` flags)."""
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def map_own_ids(uid: int, gid: int) -> None:
    """In a new user namespace: the caller keeps its user and group ids (and no other groups)."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2)."""
    result = _libc.mount(_path(source), _path(target), _path(fstype), ctypes.c_ulong(flags), _path(data))
    _check(result, f"mount {target}")


def bind_read_only(source: str, target: str, *, devices: bool = False) -> None:
    """Bind ``source`` at ``target`` (which exists), read-only unless it is a device."""
    mount(source, target, None, MS_BIND | MS_REC)
    if devices:
        return
    kept = os.statvfs(target).f_flag
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
    flags |= sum(ms for st, ms in _KEPT_FLAGS if kept & st)
    mount(None, target, None, flags)


def pivot_into(root: str) -> None:
    """Make ``root`` (a mount point) the root directory and detach the old one entirely."""
    os.chdir(root)
    number = _ARCHES[platform.machine()][2]
    _check(_libc.syscall(ctypes.c_long(number), b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", ctypes.c_int(MNT_DETACH)), "umount the old root")
    os.chdir("/")


def set_hostname(name: str) -> None:
    """sethostname(2), in a new UTS namespace."""
    encoded = name.encode()
    _check(_libc.sethostname(encoded, ctypes.c_size_t(len(encoded))), "sethostname")


def _prctl(option: int, arg: int, pointer: object = None) -> None:
    third = ctypes.c_ulong(0) if pointer is None else pointer
    zero = ctypes.c_ulong(0)
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), third, zero, zero), f"prctl {option}")


def no_new_privileges() -> None:
    """Nothing this process executes gains privileges (set-user-ID files included)."""
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def die_with_parent(signal_number: int) -> None:
    """Get ``signal_number`` when the parent process dies."""
    _prctl(PR_SET_PDEATHSIG, signal_number)


def seccomp_supported() -> bool:
    """Whether this machine's architecture has a syscall table here."""
    return platform.machine() in _ARCHES


def seccomp_program(machine: str, own_pid: int | None) -> list[tuple[int, int, int, int]]:
    """The filter's BPF instructions ``(code, jt, jf, k)`` for ``machine``.

    Sockets fail with EACCES, ``clone`` with namespace flags and the calls of ``_DENIED`` with
    EPERM, ``clone3`` with ENOSYS (the C library falls back to ``clone``, whose flags can be
    read). With ``own_pid`` the signalling calls may only name ``own_pid`` or 0 (the process
    group). A foreign architecture's calls kill the process: their numbers mean other calls.
    """
    audit_arch, x32_bit, _, numbers = _ARCHES[machine]
    table = {**numbers, **_COMMON_SYSCALLS}
    errno_ret = _RET_ERRNO
    program = [
        (_LD_ABS, 0, 0, _ARCH),
        (_JEQ, 1, 0, audit_arch),
        (_RET, 0, 0, _RET_KILL),
        (_LD_ABS, 0, 0, _NR),
    ]
    if x32_bit:
        program += [(_JGE, 0, 1, x32_bit), (_RET, 0, 0, errno_ret | errno.ENOSYS)]
    program += [(_JEQ, 0, 1, table["socket"]), (_RET, 0, 0, errno_ret | errno.EACCES)]
    program += [(_JEQ, 0, 1, table["clone3"]), (_RET, 0, 0, errno_ret | errno.ENOSYS)]
    for name in _DENIED:
        program += [(_JEQ, 0, 1, table[name]), (_RET, 0, 0, errno_ret | errno.EPERM)]
    namespaces = NAMESPACES | CLONE_NEWUSER | CLONE_NEWCGROUP
    program += [
        (_JEQ, 0, 4, table["clone"]),
        (_LD_ABS, 0, 0, _ARG0),
        (_JSET, 0, 1, namespaces),
        (_RET, 0, 0, errno_ret | errno.EPERM),
        (_RET, 0, 0, _RET_ALLOW),
    ]
    if own_pid is not None:
        for name in _SIGNALLING:
            program += [
                (_JEQ, 0, 5, table[name]),
                (_LD_ABS, 0, 0, _ARG0),
                (_JEQ, 2, 0, 0),
                (_JEQ, 1, 0, own_pid),
                (_RET, 0, 0, errno_ret | errno.EPERM),
                (_RET, 0, 0, _RET_ALLOW),
            ]
    program.append((_RET, 0, 0, _RET_ALLOW))
    return program


def install_seccomp(own_pid: int | None) -> None:
    """Install ``seccomp_program`` on this process and what it starts (needs no_new_privs)."""
    program = seccomp_program(platform.machine(), own_pid)
    filters = (_SockFilter * len(program))(*(_SockFilter(*item) for item in program))
    fprog = _SockFprog(len(program), ctypes.cast(filters, ctypes.POINTER(_SockFilter)))
    _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog))


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where there is none (or it is disabled)."""
    version = _libc.syscall(ctypes.c_long(_LANDLOCK_CREATE), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(version), 0)


def landlock_rights(abi: int) -> int:
    """Every filesystem right ABI ``abi`` can restrict."""
    rights = (1 << 13) - 1  # ABI 1: execute .. make_sym
    if abi >= 2:
        rights |= 1 << 13  # refer
    if abi >= 3:
        rights |= LL_TRUNCATE
    if abi >= 5:
        rights |= LL_IOCTL_DEV
    return rights


def restrict_paths(
    abi: int, readable: Iterable[str], writable: Iterable[str], devices: Iterable[str]
) -> None:
    """Landlock this process (needs no_new_privs): it may read and execute under ``readable``,
    do anything under ``writable``, read and write the ``devices`` files, and nothing else;
    from ABI 4 no TCP, from ABI 6 no signals or abstract sockets beyond its own domain.
    Paths that do not exist, or that this process cannot reach, are passed over."""
    handled = landlock_rights(abi)
    attr = struct.pack("=QQQ", handled, _LL_NET_TCP if abi >= 4 else 0, _LL_SCOPES if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _check(
        _libc.syscall(ctypes.c_long(_LANDLOCK_CREATE), ctypes.c_char_p(attr[:size]), ctypes.c_size_t(size),
                      ctypes.c_uint32(0)), "landlock_create_ruleset")  # fmt: skip
    file_rights = LL_READ_FILE | LL_WRITE_FILE | (handled & (LL_TRUNCATE | LL_IOCTL_DEV))
    try:
        for paths, rights in ((readable, LL_READ), (writable, handled), (devices, file_rights)):
            for path in paths:
                _allow(ruleset, path, rights)
        _check(_libc.syscall(ctypes.c_long(_LANDLOCK_RESTRICT), ctypes.c_int(ruleset), ctypes.c_uint32(0)),
               "landlock_restrict_self")  # fmt: skip
    finally:
        os.close(ruleset)


def _allow(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (FileNotFoundError, PermissionError):
        return  # what this process cannot reach needs no rule
    try:
        if not os.path.isdir(path):  # a file takes only the rights that apply to files
            rights &= LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE | LL_IOCTL_DEV
        rule = ctypes.c_char_p(struct.pack("=Qi", rights, fd))
        _check(_libc.syscall(ctypes.c_long(_LANDLOCK_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(1), rule,
                             ctypes.c_uint32(0)), f"landlock_add_rule {path}")  # fmt: skip
    finally:
        os.close(fd)
