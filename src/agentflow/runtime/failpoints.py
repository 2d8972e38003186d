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

_SPEC = os.environ.get("AGENTFLOW_FAILPOINTS", "")
_POINTS: dict[str, float] = {}
for _item in filter(None, (part.strip() for part in _SPEC.split(","))):
    _name, _, _prob = _item.partition("=")
    _POINTS[_name] = float(_prob or 1.0)
_RANDOM = random.Random(os.environ.get("AGENTFLOW_FAILPOINT_SEED"))


def failpoint(name: str) -> None:
    """Kill this process with SIGKILL if failpoint ``name`` is armed and fires."""
    if _POINTS and _RANDOM.random() < _POINTS.get(name, 0.0):
        os.kill(os.getpid(), signal.SIGKILL)
