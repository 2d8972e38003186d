"""Fixtures of the real-model tests: one llama-cpp-python server with SmolLM2 for the session.

Without the ``realmodel`` extra the tests fail, saying what to install (the README's test
command installs it): they are never skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import real_model
from tests.support.real_model import RealModelServer, real_model_server


@pytest.fixture(scope="session")
def llama_server() -> Iterator[RealModelServer]:
    """The running server (started once: loading the 100 MB model takes a few seconds)."""
    why = real_model.missing()
    if why is not None:
        pytest.fail(f"the real-model tests need the realmodel extra: {why}")
    with real_model_server() as server:
        yield server
