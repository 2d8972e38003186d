"""S2: code steps that try to escape or exhaust the worker are stopped within their limit plus
one second, nothing escapes, and the worker stays healthy.

A real ``agentflow worker`` process with code steps on (and a canary in its environment) runs
``run_code`` steps that read the environment, the worker's own environment and command line,
a file outside their directory and the worker's files; open a TCP connection to a listener
the test holds and a UNIX connection to PostgreSQL's socket; signal the worker; leave
processes behind; fork-bomb; allocate without bound; loop forever; and print without end.
Each payload has a detector that names what got out or what was not stopped in time.

Pass: no detector finds anything, each step ends with its limit's code within its limit plus
one second, the worker is alive with its memory where it was, and an ordinary step still runs.

Negative control: the same detectors on a worker whose sandbox is sabotaged (the interpreter
started directly, with the worker's environment, directory and no limits) must find escapes
in every bounded payload: the test can fail. Payloads without bounds run only confined.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from agentflow.engine import Engine
from agentflow.integrations.sandbox.code_sandbox import base_python
from agentflow.integrations.sandbox.linux import landlock_abi
from tests.conftest import make_settings
from tests.support.processes import WorkerProcess, worker_env

pytestmark = pytest.mark.fault

LIMIT = 2.0
"""The code steps' time limit, in seconds."""
SABOTAGE = """
import dataclasses, os
from agentflow.integrations.sandbox import code_sandbox as _sandbox

def _unconfined(self, program, spec):  # no launcher: the interpreter itself, as the worker
    return program, {"env": dict(os.environ), "cwd": os.getcwd()}

_execute = _sandbox.CodeSandbox._execute

async def _unlimited(self, program, stdin, limits, tier, *, expect_result=True):
    limits = dataclasses.replace(limits, timeout=3600.0, max_output_bytes=1 << 40, max_log_bytes=1 << 40)
    return await _execute(self, program, stdin, limits, tier, expect_result=expect_result)

_sandbox.CodeSandbox._command = _unconfined
_sandbox.CodeSandbox._execute = _unlimited
"""

LEAKS = """
import json, os, socket
def main(input):
    seen = {"env": dict(os.environ), "cwd": os.getcwd()}
    for path in (input["secret_path"], input["repo_file"], f"/proc/{input['worker_pid']}/environ",
                 f"/proc/{input['worker_pid']}/cmdline", "/etc/shadow"):
        try:
            with open(path, "rb") as handle:
                seen[path] = handle.read(20000).decode("utf-8", "replace").replace("\\0", " ")
        except OSError as exc:
            seen[path] = type(exc).__name__
    try:
        socket.create_connection(("127.0.0.1", input["tcp_port"]), timeout=1).close()
        seen["tcp"] = "connected"
    except OSError as exc:
        seen["tcp"] = type(exc).__name__
    try:
        unix = socket.socket(socket.AF_UNIX)
        unix.settimeout(1)
        unix.connect(input["pg_socket"])
        unix.close()
        seen["unix"] = "connected"
    except OSError as exc:
        seen["unix"] = type(exc).__name__
    return seen
"""
SIGNALS = """
import os, signal
def main(input):
    tried = {}
    for name, call in (("worker", lambda: os.kill(input["worker_pid"], signal.SIGKILL)),
                       ("everyone", lambda: os.kill(-1, signal.SIGKILL)),
                       ("worker_group", lambda: os.killpg(input["worker_pid"], signal.SIGKILL))):
        try:
            call()
            tried[name] = "sent"
        except OSError as exc:
            tried[name] = type(exc).__name__
    return tried
"""
LEAVES_SLEEPERS = """
import os, sys
def main(input):
    for _ in range(3):
        if os.fork() == 0:
            try:
                os.setsid()  # out of the group, where allowed
            except OSError:
                pass
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", input["marker"]])
    return "left three sleepers"
"""
FORKS_40 = """
import os, time
def main(input):
    forked = 0
    for _ in range(40):
        try:
            if os.fork() == 0:
                time.sleep(3)
                os._exit(0)
            forked += 1
        except OSError:
            break
    return {"forked": forked}
"""
LOOPS_4S = "import time\ndef main(input):\n    end = time.monotonic() + 4\n    while time.monotonic() < end:\n        pass\n    return 'looped'"
ALLOCATES_400MB = "def main(input):\n    hog = [bytearray(10**7) for _ in range(40)]\n    return len(hog)"
PRINTS_20MB = "import sys\ndef main(input):\n    for _ in range(20):\n        sys.stdout.write('x' * 2**20)\n    return 'printed'"
LOOPS_FOREVER = "def main(input):\n    while True:\n        pass"
FORK_BOMB = """
import os
def main(input):
    while True:
        try:
            os.fork()
        except OSError:
            pass
"""
ALLOCATES_FOREVER = "def main(input):\n    hog = []\n    while True:\n        hog.append(bytearray(10**7))"
PRINTS_FOREVER = "import sys\ndef main(input):\n    while True:\n        sys.stdout.write('x' * 2**20)"


@dataclass(frozen=True)
class Ran:
    """A payload's run as the test saw it."""

    status: str
    output: Any
    error: dict[str, Any] | None
    seconds: float
    tier: str | None = None


@dataclass
class Context:
    """What the payloads aim at, and what the detectors look for."""

    canary: str
    secret: str
    secret_path: Path
    database: str
    pg_socket: str
    tcp_port: int
    accepted: list[Any]
    worker_pid: int = 0
    marker: str = ""

    def payload_input(self) -> dict[str, Any]:
        return {
            "secret_path": str(self.secret_path), "repo_file": str(Path.cwd() / "pyproject.toml"),
            "worker_pid": self.worker_pid, "tcp_port": self.tcp_port, "pg_socket": self.pg_socket,
            "marker": self.marker,
        }  # fmt: skip


def stopped_in_time(code: str) -> Callable[[Ran, Context], list[str]]:
    def detect(ran: Ran, ctx: Context) -> list[str]:
        found = []
        if ran.error is None or ran.error["code"] != code:
            found.append(f"not stopped with {code}: {ran.status} {ran.error or str(ran.output)[:80]}")
        if ran.seconds >= LIMIT + 1.0:
            found.append(f"took {ran.seconds:.2f}s, over its limit plus one second")
        return found

    return detect


def nothing_leaked(ran: Ran, ctx: Context) -> list[str]:
    seen = ran.output if isinstance(ran.output, dict) else {}
    found = [] if ran.status == "completed" else [f"the payload did not run: {ran.error}"]
    if ctx.canary in json.dumps(seen.get("env")):
        found.append("the worker's environment got out")
    files = json.dumps({key: value for key, value in seen.items() if key.startswith("/")})
    for name, secret in (
        ("the canary", ctx.canary),
        ("the secret file", ctx.secret),
        ("the database name", ctx.database),
        ("the repository", "[tool.importlinter]"),
    ):
        if secret in files:
            found.append(f"{name} got out of a file")  # fmt: skip
    if seen.get("tcp") == "connected" or ctx.accepted:
        found.append("a TCP connection reached the test's listener")
    if seen.get("unix") == "connected":
        found.append("a UNIX connection reached PostgreSQL")
    return found


def no_signal_sent(ran: Ran, ctx: Context) -> list[str]:
    sent = [name for name, result in (ran.output or {}).items() if result == "sent" and name != "everyone"]
    return [f"a signal reached {name}" for name in sent] + (
        [] if ran.status == "completed" else [str(ran.error)]
    )


def nothing_left_behind(ran: Ran, ctx: Context) -> list[str]:
    left = marked_processes(ctx.marker)
    return [f"{len(left)} processes outlived the step"] if left else []


def forks_held_to_the_limit(ran: Ran, ctx: Context) -> list[str]:
    forked = (ran.output or {}).get("forked", 0) if isinstance(ran.output, dict) else 0
    return [f"forked {forked} processes, over the limit of 16"] if forked >= 16 else []


BOUNDED: list[tuple[str, str, dict[str, Any], Callable[[Ran, Context], list[str]]]] = [
    ("leaks", LEAKS, {}, nothing_leaked),
    ("sleepers", LEAVES_SLEEPERS, {}, nothing_left_behind),
    ("forks", FORKS_40, {}, forks_held_to_the_limit),
    ("loop-4s", LOOPS_4S, {}, stopped_in_time("code_timeout")),
    ("memory-400mb", ALLOCATES_400MB, {"memory_mb": 64}, stopped_in_time("code_memory_exceeded")),
    ("print-20mb", PRINTS_20MB, {}, stopped_in_time("code_output_too_large")),
]
"""Payloads that end by themselves: safe to run with the sandbox sabotaged."""
UNBOUNDED: list[tuple[str, str, dict[str, Any], Callable[[Ran, Context], list[str]]]] = [
    ("signals", SIGNALS, {}, no_signal_sent),
    ("loop-forever", LOOPS_FOREVER, {}, stopped_in_time("code_timeout")),
    ("fork-bomb", FORK_BOMB, {}, stopped_in_time("code_timeout")),
    ("memory-bomb", ALLOCATES_FOREVER, {"memory_mb": 64}, stopped_in_time("code_memory_exceeded")),
    ("print-forever", PRINTS_FOREVER, {}, stopped_in_time("code_output_too_large")),
]
"""Payloads only the sandbox ends."""


def marked_processes(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[Engine]:
    eng = await Engine.connect(make_settings(database_url, run_code="on"), migrate_schema=False)
    yield eng
    await eng.close()


@pytest.fixture
def context(engine: Engine, tmp_path: Path) -> Iterator[Context]:
    """The secret file, the canary, the listener; processes a failed run left are killed after."""
    secret = f"secret-{uuid.uuid4().hex}"
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(secret)
    for path, mode in ((tmp_path, 0o755), (folder, 0o755), (folder / "secret.txt", 0o644)):
        path.chmod(mode)
    parts = urlsplit(engine.db.url)
    host = parse_qs(parts.query).get("host", [parts.hostname or "/tmp"])[0]
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    accepted: list[Any] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    ctx = Context(
        canary=f"canary-{uuid.uuid4().hex}", secret=secret, secret_path=folder / "secret.txt",
        database=parts.path.lstrip("/"), pg_socket=f"{host}/.s.PGSQL.{parts.port or 5432}",
        tcp_port=listener.getsockname()[1], accepted=accepted,
    )  # fmt: skip
    assert Path(ctx.pg_socket).is_socket(), (
        f"PostgreSQL listens at {ctx.pg_socket}: the UNIX probe aims there"
    )
    try:
        yield ctx
    finally:
        stop.set()
        thread.join(2)
        listener.close()
        for pid in marked_processes(ctx.marker or "never"):
            os.kill(pid, signal.SIGKILL)


async def start_worker(
    engine: Engine, ctx: Context, log_dir: Path, name: str, prelude: str = "", **settings: str
) -> WorkerProcess:
    env = worker_env(engine.db.url, run_code="on", lease_ttl=3, poll_interval=0.2, **settings)
    env["S2_CANARY"] = ctx.canary
    worker = WorkerProcess(name, env, log_dir, concurrency=2, prelude=prelude)
    await asyncio.to_thread(worker.wait_ready)
    ctx.worker_pid = worker.pid
    return worker


async def run_payload(engine: Engine, ctx: Context, name: str, code: str, limits: dict[str, Any]) -> Ran:
    """One run: the payload with its limits, its error port to a finish that keeps the error."""
    ctx.marker = f"s2-{name}-{uuid.uuid4().hex}"
    workflow = f"s2-{name}-{uuid.uuid4().hex[:8]}"
    await engine.publish_workflow({
        "name": workflow, "kind": "structured",
        "nodes": [
            {"id": "code", "type": "run_code", "code": code, "input": ctx.payload_input(), "timeout": f"{LIMIT}s",
             **limits},
            {"id": "ok", "type": "finish", "output": {"result": "{{ input }}"}},
            {"id": "stopped", "type": "finish", "output": {"error": "{{ input }}"}},
        ],
        "edges": [{"from": "code", "to": "ok"}, {"from": "code", "port": "error", "to": "stopped"}],
    })  # fmt: skip
    run = await engine.start_run(workflow, None)
    done = await engine.wait_for_run(run.id, timeout=60)
    assert done.status.is_terminal, (name, done)
    [step] = [s for s in await engine.list_steps(run.id) if s.node_id == "code"]
    output = done.output or {}
    failed = step.status == "failed"
    tier = None if failed else (step.input or {}).get("sandbox")
    error = output.get("error") if failed else None
    return Ran(step.status, output.get("result"), error, step.duration_ms / 1000, tier)


BASIC_TIER = """
from agentflow.integrations.sandbox import code_sandbox as _sandbox
_init = _sandbox.CodeSandbox.__init__
def _basic(self, **options):  # as on a machine that cannot create namespaces
    _init(self, **{**options, "tier": "basic"})
_sandbox.CodeSandbox.__init__ = _basic
"""


def reachable_by_anyone(path: str) -> bool:
    real = Path(os.path.realpath(path))
    return all(os.stat(p).st_mode & 0o001 for p in (*real.parents, real))


def file_reads_confined(tier: str) -> bool:
    """The basic tier confines files with Landlock, which this kernel may lack (documented)."""
    return tier == "auto" or landlock_abi() > 0


@pytest.mark.timeout(240)
@pytest.mark.parametrize("tier", ["auto", "basic"])
async def test_s2_code_steps_are_stopped_in_time_nothing_escapes_and_the_worker_stays_healthy(
    engine: Engine, context: Context, log_dir: Path, tier: str
) -> None:
    settings: dict[str, str] = {}
    if tier == "basic" and os.geteuid() == 0 and not reachable_by_anyone(base_python()):
        settings["run_code_python"] = "/usr/bin/python3"  # the code's fresh user cannot enter /root
    prelude = BASIC_TIER if tier == "basic" else ""
    worker = await start_worker(engine, context, log_dir, "s2-confined", prelude=prelude, **settings)
    verdicts: dict[str, list[str]] = {}
    timings: dict[str, tuple[str, float]] = {}
    try:
        warm = await run_payload(engine, context, "warm-up", "def main(input):\n    return 'ready'", {})
        assert warm.status == "completed" and warm.output == "ready", warm
        assert warm.tier == "basic" if tier == "basic" else warm.tier in ("namespaces", "basic"), warm
        rss_before = worker.rss()
        for name, code, limits, detect in [*BOUNDED, *UNBOUNDED]:
            ran = await run_payload(engine, context, name, code, limits)
            await asyncio.sleep(0.2)  # what a payload left behind shows up by now
            verdicts[name] = detect(ran, context)
            if not file_reads_confined(tier):
                verdicts[name] = [
                    found for found in verdicts[name] if not found.endswith("got out of a file")
                ]
            timings[name] = (ran.error["code"] if ran.error else ran.status, round(ran.seconds, 2))
            assert worker.alive(), f"the worker died during {name}:\n{worker.stderr()[-2000:]}"
        after = await run_payload(engine, context, "after", "def main(input):\n    return sum(range(10))", {})
        rss_growth = worker.rss() - rss_before
    finally:
        worker.stop()
    print("\nS2 confined (payload: outcome, step seconds):", timings)
    assert {name: found for name, found in verdicts.items() if found} == {}
    assert after.status == "completed" and after.output == 45 and after.seconds < LIMIT + 1.0, after
    assert rss_growth < 100 * 2**20, f"the worker grew by {rss_growth / 2**20:.0f} MiB"
    steps = await engine.db.pool.fetchval(
        "SELECT count(*) FROM run_steps WHERE attempt > 1 OR worker <> $1", "s2-confined"
    )
    assert steps == 0, "every step ran once, on the worker that claimed it (no lease was lost)"


@pytest.mark.timeout(240)
async def test_s2_negative_control_the_same_detectors_catch_an_unconfined_sandbox(
    engine: Engine, context: Context, log_dir: Path
) -> None:
    worker = await start_worker(engine, context, log_dir, "s2-sabotaged", prelude=SABOTAGE)
    caught: dict[str, list[str]] = {}
    try:
        for name, code, limits, detect in BOUNDED:
            ran = await run_payload(engine, context, name, code, limits)
            await asyncio.sleep(0.2)
            caught[name] = detect(ran, context)
            for pid in marked_processes(context.marker):  # the escaped sleepers, now seen
                os.kill(pid, signal.SIGKILL)
    finally:
        worker.stop()
    print("\nS2 negative control (payload: what the detectors found):", caught)
    assert all(caught.values()), {name: found for name, found in caught.items() if not found}
    assert {"the worker's environment got out", "the secret file got out of a file"} <= set(caught["leaks"])
    assert "a TCP connection reached the test's listener" in caught["leaks"]
