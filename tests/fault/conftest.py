"""Fixtures of the fault tests: the recording server and a directory for worker logs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.recording_server import RecordingServer


@pytest.fixture
def recorder() -> Iterator[RecordingServer]:
    with RecordingServer() as server:
        yield server


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "workers"
    path.mkdir()
    return path
