"""The coverage gate: a whole test run fails below the project's bars (branch coverage).

pytest-cov measures every run (``--cov`` in the pytest options; ``--no-cov`` turns it off);
this plugin holds a run of the whole suite to the overall bar and to the per-package bars,
which coverage.py has no option for. A run of a few files covers little by design, so it
is held to none (``--cov-fail-under`` would fail it).
"""

from __future__ import annotations

import io
from collections.abc import Generator
from typing import Any

import pytest

OVERALL_BAR = 85.0
PACKAGE_BARS = {"core": 95.0, "store": 95.0, "runtime": 95.0}


def _whole_suite(config: pytest.Config) -> bool:
    # No paths on the command line: pytest collected its testpaths, i.e. everything.
    return config.args_source == pytest.Config.ArgsSource.TESTPATHS


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, Any, None]:
    """After pytest-cov has combined the data: check each package's bar."""
    yield
    plugin = session.config.pluginmanager.getplugin("_cov")
    controller = getattr(plugin, "cov_controller", None)
    if controller is None or controller.cov is None or not _whole_suite(session.config):
        return
    reporter = session.config.pluginmanager.getplugin("terminalreporter")
    bars = {"": OVERALL_BAR, **{f"{package}/": bar for package, bar in PACKAGE_BARS.items()}}
    for part, bar in bars.items():
        percent = controller.cov.report(include=[f"*/agentflow/{part}*"], file=io.StringIO())
        verdict = "ok" if percent >= bar else "BELOW"
        name = f"agentflow.{part.rstrip('/')}" if part else "agentflow"
        reporter.write_line(f"coverage of {name}: {percent:.1f}% (bar {bar:.0f}%) {verdict}")
        if percent < bar:
            session.testsfailed += 1
