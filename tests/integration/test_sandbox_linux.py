"""The sandbox's Linux facilities applied to a real process (``tests/support/confined_probe.py``),
which reports from inside what it can still do: seccomp, Landlock and no_new_privs; and new
namespaces with a read-only bind, a host name and no network.

The namespaces are checked where the worker's trial run says they work; elsewhere creating
them must fail, which is what sends the sandbox to its ``basic`` tier. Files are confined by
Landlock where the kernel has it; without it they are not (as docs/security.md says).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentflow.integrations.sandbox import CodeSandbox
from tests.support.processes import REPO


def probe(spec: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.confined_probe", json.dumps(spec)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    facts: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return facts


def folders(tmp_path: Path) -> dict[str, Any]:
    for name in ("writable", "elsewhere"):
        (tmp_path / name).mkdir()
    (tmp_path / "secret.txt").write_text("s3cret")
    # Coverage writes its data next to the repository when the probe exits.
    return {"secret": str(tmp_path / "secret.txt"), "writable": str(tmp_path / "writable"),
            "elsewhere": str(tmp_path / "elsewhere"), "keep_writable": [str(REPO)]}  # fmt: skip


def test_seccomp_and_landlock_leave_a_process_its_folder_and_itself(tmp_path: Path) -> None:
    facts = probe({"mode": "confine", **folders(tmp_path)})
    assert facts["socket"] == facts["unix_socket"] == "PermissionError", facts
    assert facts["signal_parent"] == "PermissionError" and facts["signal_self"] == "ok", facts
    assert facts["setsid"] == facts["unshare"] == "PermissionError", facts
    assert facts["write_allowed"] == "ok" and facts["dev_null"] == "ok", facts
    if facts["landlock"]:
        assert facts["read_secret"] == facts["write_elsewhere"] == "PermissionError", facts
    else:  # no Landlock in this kernel: files are the user's (the documented gap of `basic`)
        assert facts["read_secret"] == facts["write_elsewhere"] == "ok", facts
    assert not (tmp_path / "elsewhere" / "made").exists() or not facts["landlock"]


async def test_new_namespaces_give_a_read_only_bind_a_host_name_and_no_network(tmp_path: Path) -> None:
    tier, _ = await CodeSandbox().tier()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        facts = probe({"mode": "namespaces", "port": listener.getsockname()[1], **folders(tmp_path)})
    if tier != "namespaces":  # what sends this machine's sandbox to the basic tier
        assert facts["unshare"] == "PermissionError", facts
        return
    assert facts["unshare"] == "ok" and facts["hostname"] == "probe-host", facts
    assert facts["write_bound"] == "OSError", "read-only: EROFS"
    assert facts["write_tmpfs"] == "ok" and facts["write_device"] == "ok", facts
    assert facts["tcp"] == "OSError", "no interface is up in the new network namespace"
    assert facts["mount_missing"] == "FileNotFoundError", facts
    assert not (tmp_path / "writable" / "made").exists(), "the tmpfs lived in the probe's mount namespace"
