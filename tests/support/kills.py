"""Killing a worker at its first checkpoint, and a checkpoint that drops the steps it carries.

For fault tests of steps that ride in a later checkpoint (pure nodes, an agent's decision):
a starter script (a real subprocess with its own worker) starts a run, prints its id and is
killed (-9) by the ``before_checkpoint`` failpoint; the negative controls rescue the run with
a checkpoint that writes only its own step.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any
from uuid import UUID

import pytest

from agentflow.store import runs


async def kill_at_first_checkpoint(starter: str, database_url: str, lease_ttl: float, *more: str) -> UUID:
    """Run ``starter`` (given the database URL, the lease TTL and ``more``) until its first
    checkpoint kills it; the id of the run it printed."""
    env = {**os.environ, "AGENTFLOW_FAILPOINTS": "before_checkpoint"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", starter, database_url, str(lease_ttl), *more, stdout=asyncio.subprocess.PIPE,
        env=env,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == -9, out  # killed by its failpoint
    return UUID(out.decode().split()[0])


def drop_prior_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every checkpoint write its own step only, dropping the steps it was given."""
    real = runs.checkpoint

    async def dropping(*args: Any, **kwargs: Any) -> Any:
        return await real(*args[:8], **{k: v for k, v in kwargs.items() if k != "prior"})

    monkeypatch.setattr(runs, "checkpoint", dropping)
