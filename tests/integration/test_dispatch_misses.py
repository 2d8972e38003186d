"""Events a workflow's conditions turn down: one miss row per event, explained when read."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.engine import Engine
from agentflow.runtime.dispatcher import CONSUMER_NAME, Dispatcher


def listening(k: int) -> dict[str, Any]:
    """Workflow ``k`` starts a run for events of bucket ``k`` only."""
    return {
        "name": f"bucket-{k}",
        "kind": "structured",
        "trigger": {
            "topics": ["orders.*"],
            "conditions": [{"path": "data.bucket", "op": "equals", "value": k}],
        },
        "nodes": [{"id": "nap", "type": "wait", "duration": "1h"}],
    }


async def dispatch_all(engine: Engine) -> None:
    consumer = Dispatcher(engine.db).consumer()
    while await consumer.consume_batch() > 0:
        pass


async def three_workflows(engine: Engine) -> list[UUID]:
    return [(await engine.publish_workflow(listening(k))).workflow.id for k in range(3)]


async def publish_buckets(engine: Engine, buckets: list[int]) -> None:
    await engine.events.publish(
        [
            {"topic": "orders.updated", "message_id": f"e{i}", "data": {"bucket": b}}
            for i, b in enumerate(buckets)
        ]
    )


async def test_misses_are_one_row_per_event_and_each_workflow_lists_them_explained(engine: Engine) -> None:
    ids = await three_workflows(engine)
    await publish_buckets(engine, [0, 7, 2])  # e0 starts bucket-0, e1 starts none, e2 bucket-2
    await dispatch_all(engine)

    rows = await engine.db.pool.fetch(
        "SELECT event_message_id, workflow_ids, versions FROM dispatch_misses ORDER BY id"
    )
    assert [(r["event_message_id"], r["workflow_ids"], r["versions"]) for r in rows] == [
        ("e0", [ids[1], ids[2]], [1, 1]),
        ("e1", ids, [1, 1, 1]),
        ("e2", [ids[0], ids[1]], [1, 1]),
    ]
    stored = await engine.db.pool.fetch(
        "SELECT event_message_id, decision FROM dispatch_decisions ORDER BY id"
    )
    assert [(r["event_message_id"], r["decision"]) for r in stored] == [("e0", "started"), ("e2", "started")]

    listed = await engine.events.decisions(ids[0])
    assert [(d["event_message_id"], d["decision"]) for d in listed] == [
        ("e2", "not_matched"),
        ("e1", "not_matched"),
        ("e0", "started"),
    ]
    why = listed[0]["reason"]["conditions"]
    assert why["matched"] is False
    [rule] = why["all"]
    assert (rule["path"], rule["op"], rule["value"], rule["actual"]) == ("data.bucket", "equals", 0, 2)
    assert listed[0]["run_id"] is None and listed[0]["decided_at"] == listed[0]["created_at"]
    assert "version" not in listed[0]
    assert [d["decision"] for d in await engine.events.decisions(ids[1])] == ["not_matched"] * 3
    outcomes = await engine.db.pool.fetch(
        "SELECT event_message_id, workflow_id, decision FROM dispatch_outcomes ORDER BY id, workflow_id"
    )
    expected = [
        (f"e{e}", ids[w], "started" if bucket == w else "not_matched")
        for e, bucket in enumerate([0, 7, 2])
        for w in range(3)
    ]
    assert sorted((r["event_message_id"], r["workflow_id"], r["decision"]) for r in outcomes) == sorted(
        expected
    )


async def test_decisions_and_misses_page_together_newest_first(engine: Engine) -> None:
    ids = await three_workflows(engine)
    await publish_buckets(engine, [0, 1, 0, 2, 0, 0, 1])
    await dispatch_all(engine)
    everything = await engine.events.decisions(ids[0], limit=500)
    assert [d["event_message_id"] for d in everything] == [f"e{i}" for i in range(6, -1, -1)]
    paged: list[dict[str, Any]] = []
    before = None
    while page := await engine.events.decisions(ids[0], limit=2, before=before):
        paged += page
        before = page[-1]["id"]
    assert [(d["id"], d["decision"]) for d in paged] == [(d["id"], d["decision"]) for d in everything]
    assert [d["decision"] for d in paged].count("started") == 4


async def test_a_redelivered_batch_records_no_second_miss_or_run(engine: Engine) -> None:
    await three_workflows(engine)
    await publish_buckets(engine, [7, 1])
    await dispatch_all(engine)
    await engine.db.pool.execute("DELETE FROM consumer_offsets WHERE consumer = $1", CONSUMER_NAME)
    await dispatch_all(engine)  # the same events again, as after a crash before the cursor moved
    assert await engine.db.pool.fetchval("SELECT count(*) FROM dispatch_misses") == 2
    assert await engine.db.pool.fetchval("SELECT count(*) FROM dispatch_decisions") == 1
    assert len(await engine.list_runs()) == 1


async def test_a_miss_whose_event_was_pruned_says_why_it_cannot_be_explained(engine: Engine) -> None:
    ids = await three_workflows(engine)
    await publish_buckets(engine, [7])
    await dispatch_all(engine)
    await engine.db.pool.execute("DELETE FROM events")
    [miss] = await engine.events.decisions(ids[2])
    assert miss["decision"] == "not_matched" and miss["reason"]["conditions"] is None
    assert "no longer stored" in miss["reason"]["explanation_unavailable"]


async def test_retention_prunes_misses_with_decisions(engine: Engine) -> None:
    await three_workflows(engine)
    await publish_buckets(engine, [7, 0])
    await dispatch_all(engine)
    await engine.db.pool.execute("UPDATE dispatch_misses SET created_at = created_at - interval '2 days'")
    await engine.db.pool.execute("UPDATE dispatch_decisions SET created_at = created_at - interval '2 days'")
    _, pruned = await engine.events.prune(older_than_seconds=86400)
    assert pruned == 3  # two misses (one per event) and one started decision
    assert await engine.db.pool.fetchval("SELECT count(*) FROM dispatch_misses") == 0
