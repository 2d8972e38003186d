"""The code-quality gates run with the tests, so `pytest` checks everything CI checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "src", "tests", "benchmarks"],
        ["ruff", "format", "--check", "src", "tests", "benchmarks"],
        ["mypy"],
        ["lint-imports"],
    ],
    ids=["ruff-lint", "ruff-format", "mypy-strict", "import-layers"],
)
def test_quality_gate(command: list[str]) -> None:
    result = subprocess.run(
        [str(BIN / command[0]), *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
