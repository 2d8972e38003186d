"""The code-quality gates (ruff, mypy, import-linter) start with the session, in the background.

They need no database and mostly one core each, while the first tests leave the machine's
second core idle; started when the session's tests are collected, they are usually done by
the time ``tests/test_code_quality.py`` asks for their verdicts (mypy alone takes ~90 s cold).
A session that does not select those tests starts nothing.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
GATES: dict[str, list[str]] = {
    "ruff-lint": ["ruff", "check", "src", "tests", "benchmarks"],
    "ruff-format": ["ruff", "format", "--check", "src", "tests", "benchmarks"],
    "mypy-strict": ["mypy"],
    "import-layers": ["lint-imports"],
}
TEST_FILE = "tests/test_code_quality.py"


@dataclass
class Gate:
    """One gate's process and the file its output goes to."""

    process: subprocess.Popen[bytes]
    output: IO[bytes]

    def verdict(self, timeout: float) -> tuple[int, str]:
        """Wait for the gate; its exit code and the tail of its output."""
        code = self.process.wait(timeout=timeout)
        self.output.seek(0)
        return code, self.output.read().decode(errors="replace")[-6000:]


_started: dict[str, Gate] = {}


def start(name: str) -> Gate:
    """The gate ``name``, started now unless the session already started it."""
    if name not in _started:
        output = tempfile.TemporaryFile()  # noqa: SIM115  (closed when the session ends)
        command = GATES[name]
        process = subprocess.Popen(
            [str(BIN / command[0]), *command[1:]], cwd=ROOT, stdout=output, stderr=subprocess.STDOUT
        )
        _started[name] = Gate(process, output)
    return _started[name]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the gates this session will ask for."""
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        if item.nodeid.startswith(TEST_FILE) and callspec is not None:
            start(callspec.params["gate"])


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop gates still running (a session interrupted, or run with ``-x``)."""
    for gate in _started.values():
        if gate.process.poll() is None:
            gate.process.kill()
            gate.process.wait()
        gate.output.close()
    _started.clear()
