"""``--import`` finds a module in the working directory, as ``python -m`` would, and a missing
module is one clear line, not a traceback.

These run the real ``agentflow`` console script: ``python -c`` (what other CLI tests use) puts
the working directory on the path by itself and would hide the defect.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentflow.engine import Engine
from tests.support.cli import cli_env

AGENTFLOW = str(Path(sys.executable).with_name("agentflow"))

MYTOOLS = textwrap.dedent(
    '''
    import agentflow

    @agentflow.tool
    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()
    '''
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "mytools.py").write_text(MYTOOLS)
    return tmp_path


def _env(database_url: str) -> dict[str, str]:
    env = cli_env(database_url, AGENTFLOW_POLL_INTERVAL="0.2")
    env.pop("PYTHONPATH", None)  # only the working directory may make mytools importable
    return env


async def test_worker_imports_a_module_of_the_working_directory(
    engine: Engine, database_url: str, project: Path
) -> None:
    await engine.publish_workflow(
        {
            "name": "shouting",
            "kind": "structured",
            "nodes": [{"id": "s", "type": "tool", "tool": "shout", "args": {"text": "hello"}}],
        }
    )
    run = await engine.start_run("shouting")
    proc = subprocess.Popen(
        [AGENTFLOW, "worker", "--import", "mytools"],
        cwd=project,
        env=_env(database_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        done = await engine.wait_for_run(run.id, timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert done.status == "completed", (done.error, out, err)
    steps = await engine.list_steps(run.id)
    assert steps[-1].output == "HELLO"
    assert proc.returncode == 0, err


@pytest.mark.parametrize(
    ("args", "extra_env"),
    [
        (["worker", "--import", "nosuchtools"], {}),
        (["serve", "--port", "0", "--import", "nosuchtools"], {}),
        (["workflows", "list"], {"AGENTFLOW_IMPORTS": "nosuchtools"}),
    ],
    ids=["worker", "serve", "AGENTFLOW_IMPORTS"],
)
def test_a_missing_module_is_one_line_and_a_failure(
    database_url: str, project: Path, args: list[str], extra_env: dict[str, str]
) -> None:
    result = subprocess.run(
        [AGENTFLOW, *args],
        cwd=project,
        env={**_env(database_url), **extra_env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "import_failed" in lines[0] and "'nosuchtools'" in lines[0]
    assert os.fspath(project) in lines[0], "the error should say where it looked"
