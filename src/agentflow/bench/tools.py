"""The trivial tool every benchmark step calls (workers import this module by name)."""

from __future__ import annotations

import agentflow

NOOP = "bench_noop"


@agentflow.tool(name=NOOP)
async def bench_noop() -> None:
    """Do nothing: the step costs only the engine's own work."""
    return None
