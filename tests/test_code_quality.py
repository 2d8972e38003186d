"""The code-quality gates run with the tests, so `pytest` checks everything CI checks.

Each gate starts in the background when the session begins (tests/quality_gates.py); these
tests collect the verdicts.
"""

from __future__ import annotations

import pytest

from tests import quality_gates


@pytest.mark.parametrize("gate", list(quality_gates.GATES))
def test_quality_gate(gate: str) -> None:
    code, output = quality_gates.start(gate).verdict(timeout=600)
    assert code == 0, output
