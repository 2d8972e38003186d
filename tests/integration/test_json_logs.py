"""JSON log lines name the run, workflow, workspace and step they are about (issue 16)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import agentflow
from agentflow.engine import Engine
from agentflow.runtime.log_context import JsonFormatter
from tests.support.agents import running_worker, until

logger = logging.getLogger("tests.json_logs")


@agentflow.tool
async def say(words: str) -> dict[str, Any]:
    """Log ``words`` (a tool whose log line must name its run)."""
    logger.warning("saying %s", words)
    return {"said": words}


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


async def test_a_steps_log_line_names_its_run_and_step(engine: Engine, lines: Lines) -> None:
    await engine.publish_workflow({
        "name": "talker", "kind": "structured",
        "nodes": [{"id": "first", "type": "mapping", "output": {}},
                  {"id": "speak", "type": "tool", "tool": "say", "args": {"words": "hello"}}],
    })  # fmt: skip
    async with running_worker(engine):
        run = await engine.start_run("talker", {})
        await until(engine, run.id, lambda r: r.status.is_terminal)
    logger.warning("outside any run")
    (inside, outside) = lines.lines
    assert inside["message"] == "saying hello" and inside["level"] == "warning"
    assert (inside["run_id"], inside["workflow_id"], inside["step"]) == (str(run.id), str(run.workflow_id), 1)
    assert inside["workspace_id"] == str(run.workspace_id)
    assert "run_id" not in outside and outside["logger"] == "tests.json_logs"


def test_an_exception_is_named_with_its_type_and_the_cli_switches_to_json() -> None:
    formatter = JsonFormatter()
    try:
        raise ValueError("bad value")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    line = json.loads(formatter.format(record))
    assert (
        line["error"] == {"type": "ValueError", "message": "bad value"} and "Traceback" in line["traceback"]
    )
    # The CLI's root logger writes JSON lines with AGENTFLOW_LOG_FORMAT=json, text lines without.
    for fmt, check in (
        ("json", lambda out: json.loads(out)["message"] == "ready"),
        ("text", lambda out: out.endswith("cli: ready")),
    ):
        code = "import logging; from agentflow.runtime.log_context import configure_logging; " \
               f"configure_logging(logging.INFO, {fmt!r}); logging.getLogger('cli').info('ready')"  # fmt: skip
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert check(done.stderr.strip()), (fmt, done.stderr)
