"""Replies in Slack threads (issue 14): a ``user_input`` whose ``slack`` names a channel is
posted by the server's Slack bot (Web API ``chat.postMessage``, here a local server that speaks
it); a person's message in that message's thread reaches ``/api/public/slack/events`` signed
with the signing secret, is kept once (Slack retries), read by the workflow's model, and a
relevant reading answers the request as that Slack user. Forged callbacks, other threads and
the bot's own messages change nothing."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from uuid import UUID

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.engine import Engine
from agentflow.store import notifications
from tests.conftest import make_settings
from tests.integration.test_request_links import approval
from tests.integration.test_request_replies import Reader, replies_of
from tests.support.agents import running_worker, until
from tests.support.http_server import serve
from tests.support.target_server import Reply, TargetServer

SECRET = "slack-signing-secret-for-threads"
BOT = "xoxb-test-bot-token-0001"
POSTED = {"ok": True, "channel": "C0APPROVALS", "ts": "1700000000.000100"}
EVENTS = "/api/public/slack/events"


@pytest.fixture
def slack() -> Iterator[TargetServer]:
    with TargetServer("127.0.0.1") as server:
        server.route(
            "/api/chat.postMessage",
            Reply(200, headers={"Content-Type": "application/json"}, body=json.dumps(POSTED).encode()),
        )
        yield server


@pytest.fixture
async def engine(database_url: str, slack: TargetServer) -> AsyncIterator[Engine]:
    settings = make_settings(
        database_url, http_allow="127.0.0.1", slack_signing_secret=SECRET, slack_bot_token=BOT,
        slack_api_url=f"{slack.url}/api",
    )  # fmt: skip
    eng = await Engine.connect(settings, migrate_schema=False)
    yield eng
    await eng.close()


def signed(payload: dict[str, Any], *, secret: str = SECRET, age: float = 0.0) -> dict[str, Any]:
    """httpx arguments of a callback as Slack sends it: JSON, signed (v0)."""
    body = json.dumps(payload).encode()
    timestamp = str(int(time.time() - age))
    digest = hmac.new(secret.encode(), b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": f"v0={digest}",
    }
    return {"content": body, "headers": headers}


def message(text: str, *, thread: str = POSTED["ts"], user: str = "U0LEE", **extra: Any) -> dict[str, Any]:
    """An Events API callback for a message in a thread."""
    ts = f"{time.time():.6f}"
    event = {"type": "message", "channel": POSTED["channel"], "user": user, "text": text, "ts": ts,
             "thread_ts": thread, "client_msg_id": f"msg-{abs(hash((text, user, thread)))}", **extra}  # fmt: skip
    return {"type": "event_callback", "team_id": "T01", "event": event}


async def posted(slack: TargetServer, engine: Engine) -> dict[str, Any]:
    """The bot's chat.postMessage, once the thread it made is remembered."""
    for _ in range(300):
        calls = [c for c in slack.received if c.path == "/api/chat.postMessage"]
        known = await engine.db.pool.fetchval("SELECT count(*) FROM request_threads")
        if calls and known:
            return {"headers": calls[0].headers, "body": json.loads(calls[0].body)}
        await asyncio.sleep(0.05)
    raise AssertionError("the bot never posted the request")


async def test_a_reply_in_the_requests_slack_thread_is_read_and_answers_it(
    engine: Engine, slack: TargetServer
) -> None:
    await engine.publish_workflow(approval("refund-thread", channels=["in_app", "slack"], slack="#approvals"))
    reader = Reader()
    async with (
        running_worker(engine, model=reader.provider),
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as api,
    ):
        run = await engine.start_run("refund-thread", {"amount": 120})
        post = await posted(slack, engine)
        challenge = await api.post(EVENTS, **signed({"type": "url_verification", "challenge": "c-123"}))
        forged = await api.post(EVENTS, **signed(message("Yes, go ahead."), secret="another"))
        stale = await api.post(EVENTS, **signed(message("Yes, go ahead."), age=600))
        elsewhere = await api.post(EVENTS, **signed(message("Yes, go ahead.", thread="1699999999.000001")))
        by_bot = await api.post(EVENTS, **signed(message("Yes, go ahead.", bot_id="B01")))
        edited = await api.post(EVENTS, **signed(message("Yes, go ahead.", subtype="message_changed")))
        unsure = signed(message("Let me think about it."))
        kept = await api.post(EVENTS, **unsure)
        retried = await api.post(EVENTS, **unsure)  # Slack delivers again when unsure of us
        request_id = (await engine.requests.list(run_id=run.id))[0]["id"]
        held = await replies_of(api, str(request_id), 1)
        pending = await engine.get_run(run.id)
        decided = await api.post(EVENTS, **signed(message("Yes, go ahead.", user="U0MO")))
        done = await until(engine, run.id, lambda r: r.status.is_terminal, timeout=20)
        read = await replies_of(api, str(request_id), 2)
    assert post["headers"]["Authorization"] == f"Bearer {BOT}"
    assert post["body"]["channel"] == "#approvals" and "Refund 120 USD?" in post["body"]["text"]
    assert [b["action_id"] for b in post["body"]["blocks"][1]["elements"]] == ["approve", "reject", "open"]
    assert challenge.json() == {"status": "verified", "challenge": "c-123"}
    for refused in (forged, stale):
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "slack_signature_invalid"
    assert [r.json()["status"] for r in (elsewhere, by_bot, edited)] == ["ignored"] * 3
    assert kept.json()["status"] == retried.json()["status"] == "kept"
    assert kept.json()["reply_id"] == retried.json()["reply_id"], "a delivery Slack repeats is kept once"
    assert [(r["label"], r["outcome"], r["via"], r["sender"]) for r in held] == [
        ("uncertain", "held", "slack", "slack:U0LEE")
    ]
    assert pending.status == "waiting"
    assert decided.json()["status"] == "kept"
    assert done.output == "refunded by slack:U0MO via slack"
    assert {(r["text"], r["outcome"]) for r in read} == {
        ("Let me think about it.", "held"), ("Yes, go ahead.", "answered"),
    }  # fmt: skip
    assert len(reader.asked) == 2


async def test_without_a_bot_token_a_channel_post_fails_with_the_setting_to_set(
    database_url: str, slack: TargetServer
) -> None:
    settings = make_settings(database_url, http_allow="127.0.0.1", slack_api_url=f"{slack.url}/api")
    engine = await Engine.connect(settings, migrate_schema=False)
    try:
        await engine.publish_workflow(
            approval("refund-nobot", channels=["in_app", "slack"], slack="#approvals")
        )
        async with running_worker(engine):
            run = await engine.start_run("refund-nobot", {"amount": 120})
            await until(engine, run.id, lambda r: r.status == "waiting")
            for _ in range(300):
                notes = await notifications.list_notifications(engine.db.pool, run.workspace_id, run.id, 10)
                if notes and notes[0]["status"] == "failed":
                    break
                await asyncio.sleep(0.05)
        request = (await engine.requests.list(run_id=run.id))[0]
    finally:
        await engine.close()
    (note,) = notes
    assert note["status"] == "failed" and note["last_error"]["code"] == "slack_not_configured"
    assert "AGENTFLOW_SLACK_BOT_TOKEN" in note["last_error"]["message"]
    assert slack.received == [], "nothing reached Slack"
    assert request["status"] == "pending" and UUID(str(request["id"]))
