"""The code sandbox's pure parts: how an ending is judged, the status pipe, the seccomp filter's
decisions (run by a small BPF interpreter here), and the launcher's helpers. Real processes
are in tests/integration/test_code_sandbox.py."""

from __future__ import annotations

import errno
import json
import os
import signal
import struct
import sys

import pytest

from agentflow.integrations.sandbox import CodeLimits, CodeSandbox, Outcome, harness, linux
from agentflow.integrations.sandbox.code_sandbox import install_prefix
from agentflow.integrations.sandbox.harness import EXIT_CANNOT_RUN as CANNOT_RUN
from agentflow.integrations.sandbox.harness import EXIT_SETUP_FAILED as SETUP_FAILED
from agentflow.integrations.sandbox.launcher import fresh_id, outermost
from agentflow.integrations.sandbox.outcome import Ending, Verdict, judge
from agentflow.integrations.sandbox.watch import read_status

READY = {"ready": {"tier": "namespaces", "uid": 1 << 30}}


def ending(returncode: int | None, stdout: bytes = b"", log: bytes = b"", **facts: object) -> Ending:
    fields: dict[str, object] = {"status": [READY], "overflow": None, "timed_out": False, "seconds": 0.5}
    fields.update(facts)
    return Ending(returncode, stdout=stdout, log=log, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("case", "verdict", "detail"),
    [
        (ending(0, b'{"a": [1, "\xc3\xa9"]}'), Verdict.OK, None),
        (ending(0, b""), Verdict.NOT_JSON, "the code ended before main returned"),
        (ending(0, b"garbage{"), Verdict.NOT_JSON, "its output is not JSON"),
        (ending(-signal.SIGKILL, timed_out=True), Verdict.TIMEOUT, "wall clock"),
        (ending(-signal.SIGXCPU), Verdict.TIMEOUT, "CPU time"),
        (ending(-signal.SIGKILL, b"{", overflow="stdout"), Verdict.OUTPUT_TOO_LARGE, "stdout"),
        (ending(harness.EXIT_MEMORY, log=b"MemoryError"), Verdict.MEMORY, None),
        (ending(-signal.SIGABRT, log=b"FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory"),
         Verdict.MEMORY, None),
        (ending(1, log=b"RangeError: Array buffer allocation failed"), Verdict.MEMORY, None),
        (ending(harness.EXIT_NOT_JSON), Verdict.NOT_JSON, "exit status 70"),
        (ending(harness.EXIT_NO_MAIN), Verdict.NO_MAIN, "exit status 71"),
        (ending(1, log=b"Traceback\nKeyError: 'x'"), Verdict.FAILED, "exit status 1"),
        (ending(-signal.SIGSEGV), Verdict.FAILED, "signal SIGSEGV"),
        (ending(SETUP_FAILED, status=[{"error": "OSError: [Errno 1] unshare"}]), Verdict.SETUP_FAILED,
         "OSError: [Errno 1] unshare"),
        (ending(CANNOT_RUN, status=[{"error": "cannot run /opt/py: Permission denied"}]), Verdict.NO_INTERPRETER,
         "cannot run /opt/py: Permission denied"),
        (ending(SETUP_FAILED, status=[]), Verdict.FAILED, "exit status 125"),  # the code's own exit(125)
    ],
)  # fmt: skip
def test_an_ending_is_judged_sandbox_first_then_limits_then_the_code(
    case: Ending, verdict: Verdict, detail: str | None
) -> None:
    outcome = judge(case)
    assert outcome.verdict is verdict
    assert outcome.detail == detail or (detail is not None and detail in (outcome.detail or "")), outcome
    if verdict is Verdict.OK:
        assert outcome.value == {"a": [1, "é"]}
    assert outcome.seconds == 0.5
    if case.status == [READY]:
        assert outcome.isolation == READY["ready"]


def test_without_a_result_expected_a_clean_exit_is_enough() -> None:
    assert judge(ending(0), expect_result=False).verdict is Verdict.OK
    assert judge(ending(1), expect_result=False).verdict is Verdict.FAILED


def test_the_log_is_decoded_with_replacement_and_cut_to_its_end() -> None:
    outcome = judge(ending(1, log=b"\xff" + b"y" * 5000 + b"\nlast"))
    assert len(outcome.log) == 4000 and outcome.log.endswith("\nlast")


def test_the_status_pipe_is_read_without_waiting_and_junk_is_skipped() -> None:
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b'{"ready": {"tier": "basic"}}\nnot json\n[1, 2]\n{"error": "x"}\n')
        assert read_status(read_end) == [{"ready": {"tier": "basic"}}, {"error": "x"}]
        assert read_status(read_end) == [], "nothing more: it does not block on an open pipe"
    finally:
        os.close(read_end)
        os.close(write_end)


def test_an_interpreters_install_prefix_holds_its_libraries(tmp_path: object) -> None:
    assert install_prefix("/usr/bin/env") == "/usr"
    assert install_prefix(sys.executable).startswith("/")
    assert install_prefix("/opt/tools/python") == "/opt/tools", "not under a bin folder: its own folder"


def test_the_launcher_binds_only_the_outermost_of_nested_paths_and_picks_unused_ids() -> None:
    assert outermost(["/usr/lib", "/usr", "/lib64", "/usr", "/usr2", "/root/.pyenv/versions/3"]) == [
        "/usr",
        "/usr2",
        "/lib64",
        "/root/.pyenv/versions/3",
    ]
    ids = {fresh_id() for _ in range(200)}
    assert all((1 << 30) <= i < (1 << 31) - 2 for i in ids) and len(ids) > 190


def test_landlock_rights_grow_with_the_abi() -> None:
    assert linux.landlock_rights(1) == (1 << 13) - 1
    assert linux.landlock_rights(2) == (1 << 14) - 1
    assert linux.landlock_rights(3) == (1 << 15) - 1
    assert linux.landlock_rights(5) == (1 << 16) - 1


# A seccomp program, run here on the data the kernel gives it ------------------------------

AUDIT = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
NUMBERS = {
    "x86_64": {"read": 0, "socket": 41, "clone": 56, "kill": 62, "ptrace": 101, "setsid": 112, "clone3": 435,
               "tgkill": 234, "mount": 165},
    "aarch64": {"read": 63, "socket": 198, "clone": 220, "kill": 129, "ptrace": 117, "setsid": 157, "clone3": 435,
                "tgkill": 131, "mount": 40},
}  # fmt: skip
ALLOW, KILL = "allow", "kill"


def decide(program: list[tuple[int, int, int, int]], arch: int, nr: int, arg0: int = 0) -> str | int:
    """Run a classic BPF program (the instructions seccomp_program uses) on seccomp_data."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, arg0 & 0xFFFFFFFFFFFFFFFF, 0, 0, 0, 0, 0)
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35, 0x45):  # jeq, jge, jset
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)
        elif code == 0x06:  # ret
            if k == 0x7FFF0000:
                return ALLOW
            if k == 0x80000000:
                return KILL
            assert k & 0xFFFF0000 == 0x00050000, hex(k)
            return k & 0xFFFF
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_seccomp_filter_refuses_sockets_namespaces_and_reaching_other_processes(machine: str) -> None:
    program = linux.seccomp_program(machine, own_pid=4242)
    n, arch = NUMBERS[machine], AUDIT[machine]
    assert decide(program, arch, n["read"]) == ALLOW
    assert decide(program, arch, n["socket"], 2) == errno.EACCES  # AF_INET
    assert decide(program, arch, n["socket"], 1) == errno.EACCES  # AF_UNIX too
    for name in ("ptrace", "setsid", "mount"):
        assert decide(program, arch, n[name]) == errno.EPERM, name
    assert decide(program, arch, n["clone3"]) == errno.ENOSYS, "the C library then uses clone"
    assert decide(program, arch, n["clone"], 0x01200011) == ALLOW  # fork()
    assert decide(program, arch, n["clone"], 0x01200011 | linux.CLONE_NEWUSER) == errno.EPERM
    assert decide(program, arch, n["clone"], linux.CLONE_NEWNET) == errno.EPERM
    for target, verdict in (
        (4242, ALLOW),
        (0, ALLOW),
        (1, errno.EPERM),
        (-1, errno.EPERM),
        (4243, errno.EPERM),
    ):
        assert decide(program, arch, n["kill"], target) == verdict, target
        assert decide(program, arch, n["tgkill"], target) == verdict, target
    assert decide(program, arch, 424, 5) == ALLOW, "pidfd_send_signal needs a pidfd, which pidfd_open limits"
    assert decide(program, arch, 434, 1) == errno.EPERM  # pidfd_open
    other = AUDIT["aarch64" if machine == "x86_64" else "x86_64"]
    assert decide(program, other, n["read"]) == KILL, "another architecture's numbers mean other calls"


def test_with_another_fence_signals_are_left_to_it_and_x32_calls_are_refused() -> None:
    program = linux.seccomp_program("x86_64", own_pid=None)
    assert decide(program, AUDIT["x86_64"], NUMBERS["x86_64"]["kill"], 1) == ALLOW
    assert decide(program, AUDIT["x86_64"], 0x40000000 | 41) == errno.ENOSYS
    assert json.dumps(program)  # plain numbers, as the launcher builds them


# The trial run that picks the tier ------------------------------------------------------


async def test_a_failed_trial_run_falls_back_to_basic_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = CodeSandbox()

    async def refused(*args: object, **kwargs: object) -> Outcome:
        return Outcome(Verdict.SETUP_FAILED, detail="OSError: [Errno 1] unshare: Operation not permitted")

    monkeypatch.setattr(sandbox, "_execute", refused)
    assert await sandbox.tier() == (
        "basic",
        "this worker cannot create namespaces (OSError: [Errno 1] unshare: Operation not permitted)",
    )


async def test_without_linux_the_tier_is_basic_and_without_resource_limits_there_is_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert await CodeSandbox().tier() == ("basic", "darwin has no namespaces")
    monkeypatch.setitem(sys.modules, "resource", None)  # as on Windows: the import fails
    sandbox = CodeSandbox()
    assert await sandbox.tier() == (None, "darwin has no POSIX resource limits")
    outcome = await sandbox.run("python", "def main(i):\n    return 1", 1, CodeLimits())
    assert outcome.verdict is Verdict.UNAVAILABLE and outcome.detail == "darwin has no POSIX resource limits"


async def test_a_launcher_that_cannot_start_is_a_setup_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = CodeSandbox(tier="basic")
    monkeypatch.setattr(sandbox, "_command", lambda program, spec: (["/nonexistent/launcher"], {}))
    outcome = await sandbox.run("python", "def main(i):\n    return 1", 1, CodeLimits())
    assert outcome.verdict is Verdict.SETUP_FAILED
    assert "the sandbox could not start" in (outcome.detail or "")
