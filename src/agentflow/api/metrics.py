"""``/metrics``: the engine's counters plus queue gauges computed at scrape time (Prometheus text)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agentflow.api.deps import EngineDep
from agentflow.api.errors import DATABASE_UNAVAILABLE
from agentflow.core.statuses import RunStatus
from agentflow.runtime.metrics import REGISTRY
from agentflow.store import events, reads

logger = logging.getLogger(__name__)

router = APIRouter(tags=["operations"])


class QueueCollector(Collector):
    """Gauges from one reading of the queue (``None`` when the database did not answer).

    Args:
        figures: what ``store.reads.queue_figures`` returned, or None.
    """

    def __init__(self, figures: dict[str, Any] | None) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        """Yield ``agentflow_database_up`` and, when known, the queue gauges."""
        up = GaugeMetricFamily("agentflow_database_up", "1 when the database answered this scrape")
        up.add_metric([], 0.0 if self.figures is None else 1.0)
        yield up
        if self.figures is None:
            return
        yield GaugeMetricFamily(
            "agentflow_queue_depth", "Runs due now and not claimed by a worker", value=self.figures["depth"]
        )
        yield GaugeMetricFamily(
            "agentflow_queue_oldest_ready_seconds",
            "How long the oldest due, unclaimed run has waited",
            value=self.figures["oldest_ready_seconds"],
        )
        behind = GaugeMetricFamily(
            "agentflow_consumer_lag_events", "Events a consumer has not processed yet", labels=["consumer"]
        )
        age = GaugeMetricFamily(
            "agentflow_consumer_lag_seconds",
            "Age of the oldest event a consumer has not processed",
            labels=["consumer"],
        )
        for name, figures in self.figures.get("consumers", {}).items():
            behind.add_metric([name], float(figures["events"]))
            age.add_metric([name], float(figures["seconds"]))
        yield behind
        yield age
        by_status = GaugeMetricFamily("agentflow_runs_by_status", "Runs by status", labels=["status"])
        counts: dict[str, int] = self.figures["by_status"]
        for status in RunStatus:
            by_status.add_metric([status.value], float(counts.get(status.value, 0)))
        yield by_status


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format 0.0.4"}},
)
async def metrics(engine: EngineDep) -> Response:
    """Counters since the process started, and queue gauges read from the database now."""
    figures: dict[str, Any] | None
    try:
        figures = await reads.queue_figures(engine.db.pool)
        figures["consumers"] = await events.lags(engine.db.pool)
    except DATABASE_UNAVAILABLE as exc:
        logger.warning("metrics scrape without queue figures: %r", exc)
        figures = None
    scrape = CollectorRegistry(auto_describe=True)
    scrape.register(QueueCollector(figures))
    body = generate_latest(REGISTRY) + generate_latest(scrape)
    return Response(body, media_type=CONTENT_TYPE_PLAIN_0_0_4)
