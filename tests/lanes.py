"""The whole suite runs in three lanes: a 2-core machine is kept busy while tests wait on
PostgreSQL, subprocesses and timers (each lane alone uses about 60% of a core).

A whole-suite run (``pytest`` with no paths) hands tests to two more pytest processes, started
as soon as the tests are collected, each with its own embedded PostgreSQL. Lane B: the unit
tests (no database, pure CPU), the long B2 property test, the CLI's end-to-end tests and a
few API tests, none of which depends on timing. Lane C: B1 (schemathesis), the real-model tests,
the fault tests that count kills in graphs, child runs and a long loop,
and every other file of ``tests/integration`` that no lane names (by sorted name), so new files spread over
lanes A and C by themselves. This process (lane A) runs the rest and the fault tests that
only count, then waits for lanes B and C (one test item each, ``lane B`` / ``lane C``, that
fails with that lane's failures), and only then runs the fault tests that judge timing, on a
machine the suite no longer loads.

Each child lane's coverage is written to ``.coverage.lane-<x>`` (its own ``COVERAGE_FILE``)
and combined with this process's by pytest-cov; its output is kept in ``.lane-<x>.log``. Set
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
    "tests/e2e/test_docs_snippets.py",
)
"""Paths lane B runs: judged by no clock (rebalance when a lane ends much later than the
others: the durations of a whole run show it)."""
LANE_C = (
    "tests/integration/test_schemathesis.py",
    "tests/realmodel",
    # Fault tests that count (each node or item once after kills) and judge no clock: lane A
    # ran them first and was the long pole (its first part 677 s against B 551 s and C 440 s,
    # 2026-12-07), then ran the tests that judge time on top.
    "tests/fault/test_child_run_kills.py",
    "tests/fault/test_graph_kills.py",
    "tests/fault/test_loop_memory.py",
)
"""Paths lane C runs besides every other unnamed ``tests/integration`` file."""
SHARED = "tests/integration"
"""The directory whose remaining files lanes A and C share, alternately by sorted name."""
LAST = ("tests/fault",)
"""Run after lane B is done, on an otherwise idle machine..."""
NOT_LAST = (
    "tests/fault/test_concurrency.py",
    # Counts (each node once, the death counted as a step cut off); its clocks are timeouts.
    "tests/fault/test_eager_start_kills.py",
    # Counts (each node once after a kill between pure steps and their checkpoint); its clocks
    # are timeouts.
    "tests/fault/test_pure_step_kills.py",
    "tests/fault/test_memory.py",
    "tests/fault/test_r10_enrollment.py",
    "tests/fault/test_r12_loops.py",
    # Counts; its clock fails it only when nothing moves for 30 s (or at 180 s); a run's
    # settling read 17 s beside three busy loops (2026-12-04), over 90 s at 5% faults beside
    # other tests (2026-12-07).
    "tests/fault/test_r3_storage_faults.py",
    "tests/fault/test_r4_late_commits.py",
    # Counts (each step once); its clocks are a 60 s bound on what takes 6-10 s, and a watch
    # that a hung run must outlast.
    "tests/fault/test_silent_connection.py",
    "tests/fault/test_recording_server.py",
    # Negative controls that only have to find their fault (lost or doubled work).
    "tests/fault/test_r1_kills.py::test_r1_negative_control_catches_effects_outside_the_engines_guarantees",
    "tests/fault/test_r2_db_restarts.py::test_r2_negative_control_catches_a_server_that_acknowledges_before_commit_is_durable",
)
"""...but for the fault tests that count and judge no clock (memory, order, once-only):
they run beside lane B. A new fault test runs last unless it is listed here."""
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
    """Whether ``item`` is one of ``paths`` (directories, files or test ids) or inside one."""
    return any(item.nodeid == path or item.nodeid.startswith((path + "/", path + "::")) for path in paths)


class Lane:
    """A child pytest process running ``paths``, and its log."""

    def __init__(self, config: pytest.Config, name: str, paths: list[str]) -> None:
        self.name, self.paths = name, paths
        self.log_path = ROOT / f".lane-{name}.log"
        self.log: IO[bytes] = self.log_path.open("wb")
        env = {**os.environ, CHILD_ENV: name, "COVERAGE_FILE": str(ROOT / f".coverage.lane-{name}")}
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
            *paths,
        ]
        self.started = time.monotonic()
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def wait(self) -> tuple[int, str]:
        """The lane's exit code and the tail of its output."""
        try:
            code = self.process.wait(timeout=WAIT_LIMIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.log.flush()
        return code, self.log_path.read_text(errors="replace")[-20_000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()


class LaneItem(pytest.Item):
    """Waits for a child lane; passes when every one of its tests passed."""

    lane: Lane

    def runtest(self) -> None:
        code, output = self.lane.wait()
        seconds = time.monotonic() - self.lane.started
        summary = output.rstrip().splitlines()[-1] if output.strip() else "(no output)"
        self.add_report_section(
            "call", self.name, f"{len(self.lane.paths)} path(s): {summary} ({seconds:.0f} s)"
        )
        if code != 0:
            raise LaneFailed(output)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, LaneFailed):
            return f"{self.name} failed; its output ends (all of it in {self.lane.log_path.name}):\n{excinfo.value}"
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return ROOT / "tests" / "lanes.py", 0, self.name


class LaneFailed(Exception):
    """A child lane reported failures."""


def lane_c_paths(files: list[str]) -> list[str]:
    """Lane C's paths: its named ones, and every other file (by sorted name) of ``SHARED``
    among ``files`` (the collected files no other lane names)."""
    shared = sorted(f for f in set(files) if f.startswith(SHARED + "/") and not f.startswith(LANE_C))
    return [*LANE_C, *shared[1::2]]


_lanes: list[Lane] = []


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Hand lanes B and C their tests; run the fault tests last, after them."""
    if not _enabled(config):
        return
    rest = [item for item in items if not _under(item, LANE_B)]
    lane_c = lane_c_paths([item.nodeid.split("::", 1)[0] for item in rest if not _under(item, LANE_C)])
    own = [item for item in rest if not _under(item, tuple(lane_c))]
    if len(own) == len(items):
        return
    last = [item for item in own if _under(item, LAST) and not _under(item, NOT_LAST)]
    first = [item for item in own if item not in last]
    waiters = []
    for name, paths in (("b", list(LANE_B)), ("c", lane_c)):
        lane = Lane(config, name, paths)
        _lanes.append(lane)
        waiter = LaneItem.from_parent(session, name=f"lane {name.upper()}")
        waiter.lane = lane
        # A lane may finish long after this one gets here: the suite's per-test timeout is not its.
        waiter.add_marker(pytest.mark.timeout(WAIT_LIMIT + 60))
        waiters.append(waiter)
    items[:] = [*first, *waiters, *last]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the child lanes if this session ends before they do."""
    while _lanes:
        _lanes.pop().stop()
