"""The code sandbox with real processes, in each tier this machine offers: results and logs,
every limit's verdict, what the code cannot see, and that nothing it starts outlives it.

The ``namespaces`` tier runs where the trial run says it works (else the sandbox must say
``basic``); ``basic`` is forced on every machine. A worker running as root gives the code a
fresh unprivileged user, which must be able to run the interpreter: where the worker's own
Python is out of its reach (under /root), the system's is used, and where there is none the
sandbox must say so (``NO_INTERPRETER``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentflow.integrations.sandbox import CodeLimits, CodeSandbox, Outcome, Verdict
from agentflow.integrations.sandbox.code_sandbox import base_python
from agentflow.integrations.sandbox.outcome import Tier

LIMITS = CodeLimits(timeout=2, memory_bytes=128 << 20, max_output_bytes=100_000, max_log_bytes=100_000)


def reachable_by_anyone(path: str) -> bool:
    """Whether a user with no rights of its own may execute ``path`` (every folder on the way
    searchable by others)."""
    real = Path(os.path.realpath(path))
    folders_ok = all(os.stat(folder).st_mode & 0o001 for folder in real.parents)
    return folders_ok and bool(os.stat(real).st_mode & 0o001)


def python_for(tier: Tier) -> str | None:
    if os.geteuid() != 0 or tier == "namespaces" or reachable_by_anyone(base_python()):
        return None  # the default: the worker's own Python
    system = shutil.which("python3", path="/usr/bin:/usr/local/bin:/bin")
    return system if system and reachable_by_anyone(system) else "/nonexistent/python3"


@pytest.fixture(params=["namespaces", "basic"])
async def sandbox(request: pytest.FixtureRequest) -> CodeSandbox:
    tier: Tier = request.param
    found, why = await CodeSandbox().tier()
    if tier == "namespaces" and found != "namespaces":
        assert found == "basic" and "cannot create namespaces" in why, why
        tier = "basic"  # this machine has no namespaces for the worker: the basic tier, again
    return CodeSandbox(tier=tier, python=python_for(tier))


async def run(sandbox: CodeSandbox, code: str, value: object = None, limits: CodeLimits = LIMITS) -> Outcome:
    outcome = await sandbox.run("python", code, value, limits)
    if sandbox.interpreter("python") is None or outcome.verdict is Verdict.NO_INTERPRETER:
        pytest.fail(f"no Python an unprivileged user can run on this machine: {outcome}")
    return outcome


def marked_processes(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            continue
    return found


async def test_main_gets_the_input_and_its_json_result_comes_back_with_the_log(sandbox: CodeSandbox) -> None:
    code = "import json\ndef main(input):\n    print('got', json.dumps(input))\n    return {'n': input['n'] * 2, 'é': None}"
    outcome = await run(sandbox, code, {"n": 21})
    assert outcome.verdict is Verdict.OK, outcome
    assert outcome.value == {"n": 42, "é": None}
    assert 'got {"n": 21}' in outcome.log
    assert outcome.isolation["tier"] == sandbox._tier[0]  # type: ignore[index]
    if sys.platform == "linux":
        assert outcome.isolation["seccomp"] is True


@pytest.mark.parametrize(
    ("code", "verdict", "words"),
    [
        ("def main(input):\n    while True:\n        pass", Verdict.TIMEOUT, None),
        ("def main(input):\n    hog = []\n    while True:\n        hog.append(bytearray(10**7))", Verdict.MEMORY,
         "MemoryError"),
        ("def main(input):\n    return 'x' * 200_000", Verdict.OUTPUT_TOO_LARGE, None),
        ("def main(input):\n    while True:\n        print('y' * 10_000)", Verdict.OUTPUT_TOO_LARGE, None),
        ("def main(input):\n    open('big', 'wb').write(b'x' * (20 << 20))", Verdict.FAILED, "File too large"),
        ("def main(input):\n    raise KeyError('sku')", Verdict.FAILED, "KeyError: 'sku'"),
        ("def main(input):\n    return float('inf')", Verdict.NOT_JSON, "not JSON"),
        ("x = 1", Verdict.NO_MAIN, "defines no function main"),
        ("def main(input):\n    return [", Verdict.NO_MAIN, "SyntaxError"),
        ("import sys\ndef main(input):\n    sys.exit(0)", Verdict.NOT_JSON, None),
    ],
    ids=["loop", "memory", "result", "log", "file", "raise", "inf", "no-main", "syntax", "exit"],
)  # fmt: skip
async def test_each_way_the_code_can_end_has_its_verdict(
    sandbox: CodeSandbox, code: str, verdict: Verdict, words: str | None
) -> None:
    outcome = await run(sandbox, code)
    assert outcome.verdict is verdict, outcome
    if words:
        assert words in outcome.log, outcome.log
    assert outcome.seconds < LIMITS.timeout + 1, "stopped within its limit and a second"


async def test_forks_and_threads_stop_at_the_process_limit(sandbox: CodeSandbox) -> None:
    code = """
import os, threading, time
def main(input):
    started = 0
    try:
        for _ in range(200):
            threading.Thread(target=time.sleep, args=(3,), daemon=True).start()
            started += 1
    except RuntimeError:
        pass
    try:
        os.fork()
        forked = True
    except OSError:
        forked = False
    return {"threads": started, "forked_after": forked}
"""
    roomy = CodeLimits(timeout=5, memory_bytes=1 << 30)  # room for the threads' stacks (8 MiB each)
    outcome = await run(sandbox, code, limits=roomy)
    assert outcome.verdict is Verdict.OK, outcome
    assert outcome.value == {"threads": roomy.processes - 1, "forked_after": False}


async def test_the_code_sees_no_environment_no_outside_file_and_no_network(
    sandbox: CodeSandbox, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret-file")
    secret.chmod(0o644)
    tmp_path.chmod(0o755)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    code = f"""
import os, socket
def main(input):
    seen = {{"env": dict(os.environ)}}
    for path in ({str(secret)!r}, "/proc/{os.getpid()}/environ", "/etc/passwd"):
        try:
            seen[path] = open(path).read()[:100]
        except OSError as exc:
            seen[path] = type(exc).__name__
    try:
        socket.create_connection(("127.0.0.1", {listener.getsockname()[1]}), timeout=1).close()
        seen["socket"] = "connected"
    except OSError as exc:
        seen["socket"] = type(exc).__name__
    return seen
"""
    os.environ["AGENTFLOW_TEST_CANARY"] = "canary-value"
    try:
        outcome = await run(sandbox, code)
    finally:
        del os.environ["AGENTFLOW_TEST_CANARY"]
        stop.set()
        thread.join(2)
        listener.close()
    assert outcome.verdict is Verdict.OK, outcome
    seen = outcome.value
    assert set(seen["env"]) <= {"LC_CTYPE"}, seen["env"]  # Python itself sets LC_CTYPE in a C locale
    assert seen[str(secret)] in ("FileNotFoundError", "PermissionError"), seen
    assert seen[f"/proc/{os.getpid()}/environ"] in ("FileNotFoundError", "PermissionError"), seen
    assert seen["socket"] != "connected" and accepted == [], seen


async def test_what_the_code_leaves_running_is_killed_when_main_returns(sandbox: CodeSandbox) -> None:
    marker = f"left-behind-{uuid.uuid4().hex}"
    code = f"""
import os, sys
def main(input):
    for _ in range(3):
        if os.fork() == 0:
            try:
                os.setsid()  # leave the group, where that is allowed
            except OSError:
                pass
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)", {marker!r}])
    return "left three sleepers"
"""
    outcome = await run(sandbox, code)
    assert outcome.verdict is Verdict.OK, outcome
    await asyncio.sleep(0.2)
    assert marked_processes(marker) == []


async def test_a_cancelled_step_kills_the_code_and_what_it_started(sandbox: CodeSandbox) -> None:
    marker = f"cancelled-{uuid.uuid4().hex}"
    code = f"""
import os, sys, time
def main(input):
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)", {marker!r}])
    time.sleep(120)
"""
    task = asyncio.ensure_future(run(sandbox, code, limits=CodeLimits(timeout=60)))
    for _ in range(100):
        await asyncio.sleep(0.05)
        if marked_processes(marker):
            break
    assert marked_processes(marker), "the code started"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.2)
    assert marked_processes(marker) == []


async def test_input_past_its_limit_is_refused_before_anything_starts() -> None:
    outcome = await CodeSandbox().run("python", "def main(input):\n    return 1", "x" * (9 << 20), LIMITS)
    assert outcome.verdict is Verdict.INPUT_TOO_LARGE and "bytes" in (outcome.detail or "")


async def test_javascript_runs_where_node_is_installed_and_is_unavailable_where_not() -> None:
    sandbox = CodeSandbox()
    code = "async function main(input) {\n  console.log('log line');\n  return { sum: input.reduce((a, b) => a + b, 0) };\n}"
    outcome = await sandbox.run("javascript", code, [1, 2, 3], LIMITS)
    if shutil.which("node") is None:
        assert outcome.verdict is Verdict.NO_INTERPRETER
        return
    assert outcome.verdict is Verdict.OK, outcome
    assert outcome.value == {"sum": 6} and "log line" in outcome.log
    for source, verdict in (
        ("function main() { for (;;) {} }", Verdict.TIMEOUT),
        ("function main() { const a = []; for (;;) a.push(new Array(1e6).fill(1.5)); }", Verdict.MEMORY),
        ("function main() { const a = []; for (;;) a.push(Buffer.alloc(1 << 26, 1)); }", Verdict.MEMORY),
        ("function main() { throw new Error('boom'); }", Verdict.FAILED),
        ("function main() { return undefined; }", Verdict.NOT_JSON),
        ("function main() { return { ; }", Verdict.NO_MAIN),
        ("const main = 1;", Verdict.NO_MAIN),
        ("function main() { return 'x'.repeat(200000); }", Verdict.OUTPUT_TOO_LARGE),
    ):
        got = await sandbox.run("javascript", source, None, LIMITS)
        assert got.verdict is verdict, (source, got)


async def test_a_missing_interpreter_is_said_before_anything_starts() -> None:
    sandbox = CodeSandbox(node="/nonexistent/bin/node", python="/nonexistent/bin/python3")
    for language in ("javascript", "python"):
        outcome = await sandbox.run(language, "main", None, LIMITS)  # type: ignore[arg-type]
        assert outcome.verdict is Verdict.NO_INTERPRETER, outcome
        assert f"no {language} interpreter" in (outcome.detail or "")


async def test_requiring_namespaces_refuses_the_basic_tier() -> None:
    outcome = await CodeSandbox(require_namespaces=True, tier="basic").run(
        "python", "def main(i):\n  return 1", 1, LIMITS
    )
    assert outcome.verdict is Verdict.UNAVAILABLE and "basic" in (outcome.detail or "")


async def test_the_tier_is_found_once_by_a_trial_run() -> None:
    sandbox = CodeSandbox()
    first = await sandbox.tier()
    assert first[0] in ("namespaces", "basic") and first[1]
    assert await sandbox.tier() is first


@pytest.fixture
def python_out_of_reach() -> Iterator[str]:
    """As root: a Python under a folder only its owner may enter (as under /root). Otherwise the
    worker's own Python, which the code, running as the worker's user, may run."""
    if os.geteuid() != 0 or not reachable_by_anyone(base_python()):
        yield base_python()
        return
    folder = Path(f"/tmp/agentflow-private-{uuid.uuid4().hex}")
    (folder / "bin").mkdir(parents=True)
    wrapper = folder / "bin" / "python3"
    wrapper.write_text(f'#!/bin/sh\nexec {base_python()} "$@"\n')
    wrapper.chmod(0o755)
    folder.chmod(0o700)
    try:
        yield str(wrapper)
    finally:
        shutil.rmtree(folder)


async def test_in_the_basic_tier_an_interpreter_out_of_the_codes_reach_is_named(
    python_out_of_reach: str,
) -> None:
    outcome = await CodeSandbox(tier="basic", python=python_out_of_reach).run(
        "python", "def main(i):\n  return 1", 1, LIMITS
    )
    if os.geteuid() == 0:  # the code runs as a fresh user, which cannot enter the folder
        assert outcome.verdict is Verdict.NO_INTERPRETER, outcome
        assert "cannot run" in (outcome.detail or "") and "Permission denied" in (outcome.detail or "")
    else:  # the code runs as the worker's user, who can
        assert outcome.verdict is Verdict.OK, outcome
