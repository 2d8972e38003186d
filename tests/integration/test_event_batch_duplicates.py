"""The same (topic, message_id) twice in one batch: stored once, and only the first says ``created``.

Before: the insert kept one row but both answers said ``created: true`` (and the API counted 2).
"""

from __future__ import annotations

import httpx

from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.support.http_server import serve


async def test_a_repeated_message_id_in_one_batch_is_created_once(engine: Engine) -> None:
    published = await engine.events.publish(
        [
            {"topic": "email.received", "message_id": "m-1", "data": {"n": 1}},
            {"topic": "note.added", "message_id": "m-1", "data": {"n": 2}},  # another topic: another event
            {"topic": "email.received", "message_id": "m-1", "data": {"n": 3}},
        ]
    )
    assert [p.created for p in published] == [True, True, False]
    first, _, again = published
    # The repeat answers with the event that was stored: the first one's data and position.
    assert again.event.data == {"n": 1} and again.event.seq == first.event.seq
    assert await engine.db.pool.fetchval("SELECT count(*) FROM events") == 2

    # Across batches nothing changes: the key is known, so created is false.
    later = await engine.events.publish([{"topic": "email.received", "message_id": "m-1"}])
    assert [p.created for p in later] == [False]


async def test_the_api_counts_a_repeat_in_one_batch_as_not_created(engine: Engine) -> None:
    async with serve(create_app(engine)) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        response = await http.post(
            "/api/events",
            json={
                "events": [
                    {"topic": "ticket.opened", "message_id": "t-1", "data": {"n": 1}},
                    {"topic": "ticket.opened", "message_id": "t-1", "data": {"n": 2}},
                ]
            },
        )
    assert response.status_code == 201, response.text
    body = response.json()
    assert [e["created"] for e in body["events"]] == [True, False]
    assert body["created"] == 1
    assert body["events"][0]["seq"] == body["events"][1]["seq"]
