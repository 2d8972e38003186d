"""Prometheus metrics of the engine (served on ``/metrics``).

Labels stay bounded: a step's ``kind`` and ``status`` are from fixed sets; a ``workflow`` label
carries the workflow's name only for the workflows an operator lists
(``AGENTFLOW_METRICS_WORKFLOWS``, or ``*`` for the first ``MAX_LABELLED`` names seen), every
other run counts as ``other``; a ``model`` label carries the model's name for the first
``MAX_LABELLED`` models seen, then ``other``.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

RUNS_STARTED = Counter("agentflow_runs_started", "Runs started", registry=REGISTRY)
RUNS_TERMINAL = Counter(
    "agentflow_runs_terminal", "Runs that reached a terminal status", ["status"], registry=REGISTRY
)
STEPS = Counter("agentflow_steps", "Step attempts checkpointed", ["status"], registry=REGISTRY)
CLAIMS = Counter("agentflow_claims", "Runs claimed by workers", registry=REGISTRY)
RESCUES = Counter("agentflow_rescues", "Runs claimed after their lease expired", registry=REGISTRY)
EAGER_STARTS = Counter(
    "agentflow_eager_starts",
    "Runs started held by a worker of the starting process (no claim)",
    registry=REGISTRY,
)
FENCED = Counter(
    "agentflow_fenced_writes_rejected",
    "Checkpoints discarded because the worker had lost its lease",
    registry=REGISTRY,
)
STEP_SECONDS = Histogram(
    "agentflow_step_duration_seconds",
    "How long a checkpointed step attempt ran (its node's work, before the checkpoint)",
    ["kind", "status", "workflow"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)
MODEL_CALLS = Counter(
    "agentflow_model_calls", "Model calls of checkpointed steps", ["model"], registry=REGISTRY
)
MODEL_TOKENS = Counter(
    "agentflow_model_tokens",
    "Tokens of checkpointed steps' model calls (type: input, output, cached_input)",
    ["model", "type"],
    registry=REGISTRY,
)
MODEL_COST = Counter(
    "agentflow_model_cost_usd", "USD cost of checkpointed steps' model calls", ["model"], registry=REGISTRY
)

MODEL_CALL_SECONDS = Histogram(
    "agentflow_model_call_duration_seconds",
    "How long a model call took (outcome: ok or error), retries inside the adapter included",
    ["model", "outcome"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120),
    registry=REGISTRY,
)

MAX_LABELLED = 100
OTHER = "other"


class BoundedLabels:
    """Label values from an allow-list, or (``*``) the first ``limit`` values seen; else
    ``other``, so a metric's series stay bounded whatever runs.

    Args:
        allowed: the values that get their own label; ``["*"]``: any, up to ``limit``.
        limit: how many values ``*`` admits.
    """

    def __init__(self, allowed: list[str], limit: int = MAX_LABELLED) -> None:
        self._any = "*" in allowed
        self._seen: set[str] = {value for value in allowed if value != "*"}
        self._limit = limit

    def of(self, value: str) -> str:
        """``value`` when it may be a label, else ``other``."""
        if value in self._seen:
            return value
        if self._any and len(self._seen) < self._limit:
            self._seen.add(value)
            return value
        return OTHER


MODELS = BoundedLabels(["*"])
"""Model names: the first ``MAX_LABELLED`` seen by this process get their own label."""


def observe_step(
    kind: str,
    status: str,
    seconds: float,
    workflow: str,
    model: str | None = None,
    tokens: tuple[int, int, int] = (0, 0, 0),
    usd: float = 0.0,
    calls: int = 0,
) -> None:
    """Count a checkpointed step attempt: its duration and, for model calls, their tokens
    (input, output, cached input) and cost."""
    labelled(STEPS, status).inc()
    labelled(STEP_SECONDS, kind, status, workflow).observe(max(seconds, 0.0))
    if model is None:
        return
    name = MODELS.of(model)
    labelled(MODEL_CALLS, name).inc(calls)
    for kind_of_token, count in zip(("input", "output", "cached_input"), tokens, strict=True):
        if count:
            labelled(MODEL_TOKENS, name, kind_of_token).inc(count)
    if usd:
        labelled(MODEL_COST, name).inc(usd)


_CHILDREN: dict[tuple[Any, tuple[str, ...]], Any] = {}


def labelled(metric: Counter | Histogram, *values: str) -> Any:
    """``metric.labels(*values)``, kept: looking a child up is a dict hit instead of the
    client's checks and lock at every step (the label values are bounded, see above)."""
    key = (metric, values)
    found = _CHILDREN.get(key)
    if found is None:
        found = _CHILDREN[key] = metric.labels(*values)
    return found
