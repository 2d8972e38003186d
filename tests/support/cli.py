"""Run the agentflow CLI as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
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
