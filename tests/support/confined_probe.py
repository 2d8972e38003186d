"""A process that confines itself with the sandbox's Linux facilities and reports, as JSON on
stdout, what it can still do (``python -m tests.support.confined_probe '<spec>'``).

The code sandbox applies these in a fresh ``python -I -S``, where coverage cannot follow and the
confinement would stop it writing anyway; this probe applies them in an ordinary subprocess
(the coverage data folder stays writable) so the facilities are tested, and measured, directly.

Spec: ``{"mode": "confine" | "namespaces", "secret": path, "writable": path, "elsewhere": path,
"keep_writable": [paths], "port": int}``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

from agentflow.integrations.sandbox import linux


def attempt(action: Callable[[], object]) -> str:
    """``ok``, or the name of the exception ``action`` raised."""
    try:
        action()
    except OSError as exc:
        return type(exc).__name__
    return "ok"


def write(path: str) -> None:
    with open(path, "w") as handle:
        handle.write("x")


def read(path: str) -> None:
    with open(path) as handle:
        handle.read()


def confine(spec: dict[str, Any]) -> dict[str, Any]:
    """no_new_privs, Landlock (where the kernel has it), seccomp: then try what they stop."""
    linux.no_new_privileges()
    linux.die_with_parent(signal.SIGKILL)
    abi = linux.landlock_abi()
    if abi:
        readable = ["/usr", "/lib", "/lib64", "/bin", "/etc/ld.so.cache", "/nonexistent-path", sys.prefix]
        writable = [spec["writable"], *spec["keep_writable"]]
        linux.restrict_paths(abi, readable, writable, ["/dev/null"])
    linux.install_seccomp(os.getpid())
    return {
        "landlock": abi,
        "socket": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
        "unix_socket": attempt(lambda: socket.socket(socket.AF_UNIX)),
        "read_secret": attempt(lambda: read(spec["secret"])),
        "write_allowed": attempt(lambda: write(os.path.join(spec["writable"], "made"))),
        "write_elsewhere": attempt(lambda: write(os.path.join(spec["elsewhere"], "made"))),
        "dev_null": attempt(lambda: write("/dev/null")),
        "signal_parent": attempt(lambda: os.kill(os.getppid(), 0)),
        "signal_self": attempt(lambda: os.kill(os.getpid(), 0)),
        "setsid": attempt(os.setsid),
        "unshare": attempt(lambda: linux.unshare(linux.CLONE_NEWUSER)),
    }


def namespaces(spec: dict[str, Any]) -> dict[str, Any]:
    """New namespaces, a tmpfs with a read-only bind in it, a host name: then try them."""
    euid, egid = os.geteuid(), os.getegid()
    facts: dict[str, Any] = {
        "unshare": attempt(
            lambda: linux.unshare(linux.NAMESPACES | (0 if euid == 0 else linux.CLONE_NEWUSER))
        )
    }
    if facts["unshare"] != "ok":
        return facts
    if euid != 0:
        linux.map_own_ids(euid, egid)
    root = spec["writable"]
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    linux.mount("tmpfs", root, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "size=1m")
    os.mkdir(f"{root}/usr")
    linux.bind_read_only("/usr", f"{root}/usr")
    open(f"{root}/null", "a").close()
    linux.bind_read_only("/dev/null", f"{root}/null", devices=True)
    linux.set_hostname("probe-host")
    facts.update(
        hostname=socket.gethostname(),
        write_bound=attempt(lambda: write(f"{root}/usr/made")),
        write_tmpfs=attempt(lambda: write(f"{root}/made")),
        write_device=attempt(lambda: write(f"{root}/null")),
        tcp=attempt(lambda: socket.create_connection(("127.0.0.1", spec["port"]), timeout=1).close()),
        mount_missing=attempt(lambda: linux.mount(None, "/nonexistent-path", None, linux.MS_BIND)),
    )
    return facts


def main() -> None:
    spec = json.loads(sys.argv[1])
    facts = confine(spec) if spec["mode"] == "confine" else namespaces(spec)
    print(json.dumps(facts), flush=True)


if __name__ == "__main__":
    main()
