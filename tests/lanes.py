"""The whole suite runs in two lanes, so a 2-core machine uses both cores.

A whole-suite run (``pytest`` with no paths) hands the tests under ``LANE_B`` to a second
pytest process, started as soon as the tests are collected, with its own embedded
PostgreSQL: the unit tests (no database, pure CPU), the long B1/B2 property tests, the
CLI's end-to-end tests and a few API tests, none of which depends on timing. This process
(lane A) runs the rest and the fault tests that only count, then waits for lane B (one test
item, ``lane B``, that fails with lane B's failures), and only then runs the fault tests
that judge timing, on a machine the suite no longer loads.

Lane B's coverage is written to ``.coverage.lane-b`` (its own ``COVERAGE_FILE``) and
combined with this process's by pytest-cov; its output is kept in ``.lane-b.log``. Set
``AGENTFLOW_TEST_LANES=0`` to run everything in one process; a run of chosen paths, or one
that selects (``-k``, ``-m``, ``--deselect``) or stops early (``-x``, ``--maxfail``), always does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
LANE_B = (
    "tests/unit",
    "tests/browser",
    "tests/integration/test_b2_lifecycle.py",
    "tests/integration/test_schemathesis.py",
    "tests/e2e/test_bench_smoke.py",
    "tests/e2e/test_cli.py",
    "tests/e2e/test_cli_imports.py",
    "tests/e2e/test_cli_knowledge.py",
    "tests/e2e/test_cli_runs.py",
    "tests/e2e/test_cli_state.py",
    "tests/integration/test_api.py",
    "tests/integration/test_bad_input.py",
    "tests/integration/test_local_retrieval.py",
    "tests/integration/test_s3_prompt_injection.py",
)
"""Paths lane B runs: judged by no clock, and about half of the time the tests other than the
fault tests take (rebalance when that changes: the durations of a whole run show it)."""
LAST = ("tests/fault",)
"""Run after lane B is done, on an otherwise idle machine..."""
NOT_LAST = (
    "tests/fault/test_child_run_kills.py",
    "tests/fault/test_concurrency.py",
    "tests/fault/test_graph_kills.py",
    "tests/fault/test_loop_memory.py",
    "tests/fault/test_memory.py",
    "tests/fault/test_r10_enrollment.py",
    "tests/fault/test_r12_loops.py",
    "tests/fault/test_r4_late_commits.py",
    "tests/fault/test_recording_server.py",
)
"""...but for the fault tests that count and judge no clock (memory, order, once-only):
they run beside lane B. A new fault test runs last unless it is listed here."""
LOG = ROOT / ".lane-b.log"
COVERAGE_FILE = ROOT / ".coverage.lane-b"
CHILD_ENV = "AGENTFLOW_TEST_LANE"
WAIT_LIMIT = 1800.0
SELECTING_OPTIONS = ("keyword", "markexpr", "deselect", "maxfail")
"""Option dests that narrow or stop a run (-x is ``maxfail=1``)."""


def _enabled(config: pytest.Config) -> bool:
    whole_suite = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    return (
        whole_suite
        and not os.environ.get(CHILD_ENV)
        and os.environ.get("AGENTFLOW_TEST_LANES", "1") != "0"
        and not config.option.collectonly
        # A selection (-k, -m, --deselect) or a stop (-x, --maxfail) is this process's: lane B
        # would ignore it. Read with getattr: pytest names these options' dests, not the flags.
        and not any(getattr(config.option, name, None) for name in SELECTING_OPTIONS)
    )


def _under(item: pytest.Item, paths: tuple[str, ...]) -> bool:
    return any(item.nodeid.startswith((path + "/", path + "::")) for path in paths)


class LaneB:
    """The second pytest process and its log."""

    def __init__(self, config: pytest.Config) -> None:
        self.log: IO[bytes] = LOG.open("wb")
        env = {**os.environ, CHILD_ENV: "b", "COVERAGE_FILE": str(COVERAGE_FILE)}
        cov = ["--no-cov"] if getattr(config.option, "no_cov", False) else []  # else addopts' --cov
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rfE",
            "--durations=30",
            *cov,
            *LANE_B,
        ]
        self.started = time.monotonic()
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def wait(self) -> tuple[int, str]:
        """Lane B's exit code and the tail of its output."""
        try:
            code = self.process.wait(timeout=WAIT_LIMIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.log.flush()
        return code, LOG.read_text(errors="replace")[-20_000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()


class LaneBItem(pytest.Item):
    """Waits for lane B; passes when every one of its tests passed."""

    lane: LaneB

    def runtest(self) -> None:
        code, output = self.lane.wait()
        seconds = time.monotonic() - self.lane.started
        summary = output.rstrip().splitlines()[-1] if output.strip() else "(no output)"
        self.add_report_section("call", "lane B", f"{' '.join(LANE_B)}: {summary} ({seconds:.0f} s)")
        if code != 0:
            raise LaneBFailed(output)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, LaneBFailed):
            return f"lane B ({' '.join(LANE_B)}) failed; its output ends (all of it in {LOG.name}):\n{excinfo.value}"
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return ROOT / "tests" / "lanes.py", 0, "lane B"


class LaneBFailed(Exception):
    """Lane B reported failures."""


_lane: LaneB | None = None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Hand lane B's tests to a second process; run the fault tests last, after it."""
    global _lane
    if not _enabled(config):
        return
    own = [item for item in items if not _under(item, LANE_B)]
    if len(own) == len(items):
        return
    last = [item for item in own if _under(item, LAST) and not _under(item, NOT_LAST)]
    first = [item for item in own if item not in last]
    _lane = LaneB(config)
    waiter = LaneBItem.from_parent(session, name="lane B")
    waiter.lane = _lane
    # Lane B may finish long after this lane gets here: the suite's per-test timeout is not its.
    waiter.add_marker(pytest.mark.timeout(WAIT_LIMIT + 60))
    items[:] = [*first, waiter, *last]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop lane B if this session ends before it does."""
    global _lane
    if _lane is not None:
        _lane.stop()
        _lane = None
