"""A process started with a bad ``AGENTFLOW_EVENT_LOOP`` stops at once with one line naming
the choices (exit 2), as for ``AGENTFLOW_TRACES``."""

from __future__ import annotations

import os

from tests.support.cli import run_cli


def test_a_bad_event_loop_stops_the_cli_with_the_choices() -> None:
    env = {**os.environ, "AGENTFLOW_EVENT_LOOP": "trio"}
    result = run_cli(["nodes", "list"], env, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "AGENTFLOW_EVENT_LOOP is 'trio'; use one of auto, uvloop, asyncio" in result.stderr
    assert "Traceback" not in result.stderr
