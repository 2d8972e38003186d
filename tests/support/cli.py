"""Run the agentflow CLI: as a real subprocess, or in this process (``invoke_cli``)."""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from agentflow.cli import main; main()"]


def cli_env(database_url: str, **extra: str) -> dict[str, str]:
    """The environment of a CLI process on ``database_url`` that can import tests.*."""
    env = {**os.environ, "AGENTFLOW_DATABASE_URL": database_url, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    env.update(extra)
    return env


def run_cli(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``agentflow ARGS`` to completion."""
    return subprocess.run([*CLI, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def start_cli(args: list[str], env: dict[str, str], **kwargs: Any) -> subprocess.Popen[str]:
    """Start ``agentflow ARGS`` in the background."""
    return subprocess.Popen(
        [*CLI, *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def invoke_cli(
    args: list[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``agentflow ARGS`` in this process and answer as ``run_cli`` does.

    For tests of what a command does rather than of the process (signals, start-up, the
    console script): the same Typer app, arguments and environment, without the second or
    two a fresh interpreter spends importing the engine. It runs in a thread of its own, so
    the command's ``asyncio.run`` never meets the test's event loop.
    """
    from typer.testing import CliRunner

    from agentflow.cli import app
    from agentflow.cli.common import console, err_console

    for output in (console, err_console):
        output.width = int(env.get("COLUMNS", "200"))  # as a process started with COLUMNS=200
    runner = CliRunner()
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(runner.invoke, app, args, env=env).result(timeout)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert result.exc_info is not None
        stderr += "".join(traceback.format_exception(*result.exc_info))
    return subprocess.CompletedProcess(["agentflow", *args], result.exit_code, result.stdout, stderr)
