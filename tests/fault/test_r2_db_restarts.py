"""R2 (CI-sized): crash and restart PostgreSQL during an ingest; nothing acknowledged is lost.

The test starts its own PostgreSQL cluster (the ``pgserver`` package's binaries, a temporary
directory, a free port), migrates it, and publishes a structured workflow whose trigger
listens to the ingested topic with an enrollment key over 200 accounts (a 0.3 s ``wait``,
then ``finish``). A real ``agentflow serve`` process (API, worker, dispatcher) runs on it
while four producer processes POST 2,400 events to ``/api/events`` with their own message
ids, about 20% of them POSTed again later with the same id, each retried on a 503 or a
connection error until a 2xx acknowledges it. Meanwhile the test crashes the server with
``pg_ctl -m immediate`` at seeded random moments (every 3-6 s, down 0.5-2 s, at least three
times during the ingest), and a monitor samples the runs table for keys held by two active
runs.

Then an independent reconciliation (plain SQL on the events, decisions and runs tables,
against what the producers were answered) must find every acknowledged event stored, once;
every answer to a re-post naming the original event; no HTTP 5xx other than 503, and every
503 with ``Retry-After``; every stored event decided once by the dispatcher; every run
started by one decision and ``completed`` within 60 s after the last restart; never two
active runs for one key; no ERROR logged by serve (the gatekeeper's, which logs outages at
ERROR, are reported apart). The verdict is printed as JSON with the seed (rerun with
``AGENTFLOW_FAULT_SEED``).

Negative controls prove the checks and the fault are real:

* In the main session a naive producer posts to its own topic and counts a 503 or a
  connection error as acknowledged. The same reconciliation must report lost events for it:
  the outages really hit the ingest, and "acknowledged but not stored" is detected.
* ``test_r2_negative_control_...`` runs the same chaos against a server that acknowledges
  before its commit is durable: ``agentflow serve`` connects with ``synchronous_commit=off``
  (a session setting in its URL; no product code changes). PostgreSQL 16 writes async
  commits out whenever a WAL page fills, so a crash loses only those in the last partial
  page; serving the API alone keeps that page full of events, and the reconciliation must
  report acknowledged events lost. This also shows that the restarts are real crashes: a
  graceful (``-m fast``) stop writes everything out and the control would find nothing.
  This is the closer control of the two: the bug it plants is on the server's side, where
  G1 is promised.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.fault.checks import print_verdict, problems
from tests.fault.ingest_chaos import Plan, ingest_under_restarts, reconcile_session

pytestmark = pytest.mark.fault


def _seed(name: str) -> int:
    seed = int(os.environ.get("AGENTFLOW_FAULT_SEED") or random.SystemRandom().randrange(1, 10**6))
    print(f"\n{name} seed={seed} (rerun with AGENTFLOW_FAULT_SEED={seed})")
    return seed


@pytest.mark.timeout(240)
async def test_r2_database_restarts_lose_and_duplicate_no_acknowledged_event(log_dir: Path) -> None:
    seed = _seed("R2")
    plan = Plan(producers=4, events_per_producer=600, rate=28.0, min_restarts=3, naive_events=150)
    session, cluster = await ingest_under_restarts(plan, log_dir, seed)
    try:
        verdict = await reconcile_session(session, cluster)
    finally:
        cluster.remove()
    print_verdict("R2", verdict)

    assert len(session.restarts) >= plan.min_restarts, session.restarts
    assert verdict["events"] == plan.producers * plan.events_per_producer
    assert verdict["reposts"] >= 0.15 * verdict["events"]
    assert problems(verdict) == {}, f"seed {seed}: {problems(verdict)}"
    assert verdict["stored"] == verdict["events"]
    # The outages really hit the ingest: 503s were answered, and the naive producer, which
    # counts them as acknowledgements, lost events by the same reconciliation.
    assert verdict["statuses"].get("503", 0) > 0
    assert verdict["naive_producer_control"]["lost"]["acknowledged_events"] > 0
    # Both of the dispatcher's paths ran: runs started, and events enrolled into active runs.
    assert verdict["decisions"].get("started", 0) > 0 and verdict["decisions"].get("enrolled", 0) > 0
    assert session.monitor_polls > 0


@pytest.mark.timeout(180)
async def test_r2_negative_control_catches_a_server_that_acknowledges_before_commit_is_durable(
    log_dir: Path,
) -> None:
    """The same chaos and checks against ``synchronous_commit=off`` must report lost events."""
    seed = _seed("R2-negative")
    plan = Plan(
        producers=3,
        # Long enough (over 16 s at 30/s) for two crashes 3-6 s apart whatever the seed.
        events_per_producer=500,
        rate=30.0,
        min_restarts=2,
        with_worker=False,
        serve_url_params={"synchronous_commit": "off"},
    )
    session, cluster = await ingest_under_restarts(plan, log_dir, seed)
    try:
        verdict = await reconcile_session(session, cluster)
    finally:
        cluster.remove()
    print_verdict("R2-negative", verdict)

    assert len(session.restarts) >= plan.min_restarts
    assert verdict["lost"]["acknowledged_events"] > 0, problems(verdict)
