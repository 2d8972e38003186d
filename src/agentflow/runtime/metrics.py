"""Prometheus counters of the engine (served on ``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

REGISTRY = CollectorRegistry(auto_describe=True)

RUNS_STARTED = Counter("agentflow_runs_started", "Runs started", registry=REGISTRY)
RUNS_TERMINAL = Counter(
    "agentflow_runs_terminal", "Runs that reached a terminal status", ["status"], registry=REGISTRY
)
STEPS = Counter("agentflow_steps", "Step attempts checkpointed", ["status"], registry=REGISTRY)
CLAIMS = Counter("agentflow_claims", "Runs claimed by workers", registry=REGISTRY)
RESCUES = Counter("agentflow_rescues", "Runs claimed after their lease expired", registry=REGISTRY)
FENCED = Counter(
    "agentflow_fenced_writes_rejected",
    "Checkpoints discarded because the worker had lost its lease",
    registry=REGISTRY,
)
