"""Named failpoints for fault tests: kill the worker process at a chosen moment.

Off unless ``AGENTFLOW_FAILPOINTS`` is set, e.g. ``after_step=0.05,before_checkpoint=0.02``
(name=probability). ``AGENTFLOW_FAILPOINT_SEED`` makes the choice repeatable. The names:
``after_claim``, ``before_step``, ``after_step`` (the effect happened, nothing is
checkpointed), ``before_checkpoint`` and ``after_checkpoint``.
"""

from __future__ import annotations

import os
import random
import signal


def armed(spec: str) -> dict[str, float]:
    """The failpoints a spec arms (``after_step=0.05,before_checkpoint``: name=probability,
    1 when no probability is given)."""
    points: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, probability = item.partition("=")
        points[name] = float(probability or 1.0)
    return points


_POINTS = armed(os.environ.get("AGENTFLOW_FAILPOINTS", ""))
_RANDOM = random.Random(os.environ.get("AGENTFLOW_FAILPOINT_SEED"))


def failpoint(name: str) -> None:
    """Kill this process with SIGKILL if failpoint ``name`` is armed and fires."""
    if _POINTS and _RANDOM.random() < _POINTS.get(name, 0.0):
        os.kill(os.getpid(), signal.SIGKILL)  # pragma: no cover (the process is gone: nothing records it)
