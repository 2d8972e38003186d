"""Requests answered through emailed links (issue 14): a ``user_input`` with the ``email``
channel mails each assignee that is an address a single-use link, through a real SMTP server;
following it over HTTP shows the request and answers it as that person. A forged or expired
link gets 401 and changes nothing; a second answer, through any channel, gets 409."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit
from uuid import UUID

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.core.errors import ConfigError
from agentflow.engine import Engine
from agentflow.integrations.smtp_sink import SmtpSink
from tests.conftest import make_settings
from tests.support.agents import running_worker, until
from tests.support.http_server import serve
from tests.support.recording_server import RecordingServer

LINK = re.compile(r"(http://\S+/answer)#request=([0-9a-f-]{36})&token=([A-Za-z0-9_-]+)")
HEADER = "X-Agentflow-Request-Token"
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[SmtpSink]:
    sink = SmtpSink(jsonl_path=tmp_path / "mail.jsonl")
    sink.start()
    yield sink
    sink.stop()


@pytest.fixture
async def engine(database_url: str, sink: SmtpSink) -> AsyncIterator[Engine]:
    settings = make_settings(
        database_url,
        smtp_url=sink.url,
        smtp_from="agentflow@example.com",
        http_allow="127.0.0.1",
        slack_signing_secret=SLACK_SECRET,
    )
    eng = await Engine.connect(settings, migrate_schema=False)
    yield eng
    await eng.close()


def approval(name: str, **ask: Any) -> dict[str, Any]:
    node = {
        "id": "ask",
        "type": "user_input",
        "message": "Refund {{ payload.amount }} USD?",
        "assignees": ["lee@example.com", "ops-team"],
        "channels": ["in_app", "email"],
        **ask,
    }
    ends = [
        ("approved", "refunded by {{ input.responded_by }} via {{ input.responded_via }}"),
        ("rejected", "no"),
    ]
    if ask.get("timeout_action") == "continue":
        ends.append(("timeout", "nobody"))
    return {
        "name": name,
        "kind": "structured",
        "nodes": [node, *({"id": f"on_{p}", "type": "finish", "output": o} for p, o in ends)],
        "edges": [{"from": "ask", "port": p, "to": f"on_{p}"} for p, _ in ends],
    }


async def mailed_link(engine: Engine, sink: SmtpSink, run_id: UUID) -> tuple[str, str, str]:
    """(answer page, request id, token) of the link mailed for the run's request."""
    await until(engine, run_id, lambda r: r.status == "waiting", timeout=20)
    for _ in range(200):
        if sink.messages:
            break
        await asyncio.sleep(0.05)
    (message,) = sink.messages
    assert message.rcpt_tos == ["lee@example.com"], "only assignees that are addresses get mail"
    assert message.subject.startswith("Approval needed: Refund 120 USD?")
    found = LINK.search(message.body)
    assert found is not None, message.body
    return found.group(1), found.group(2), found.group(3)


async def test_the_emailed_link_shows_the_request_and_answers_it_as_that_person(
    engine: Engine, sink: SmtpSink
) -> None:
    await engine.publish_workflow(approval("refund-mail"))
    async with (
        running_worker(engine),
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as api,
    ):
        run = await engine.start_run("refund-mail", {"amount": 120})
        page, request_id, token = await mailed_link(engine, sink, run.id)
        path = f"/api/public/requests/{request_id}"
        shown = await api.get(path, headers={HEADER: token})
        forged = await api.get(path, headers={HEADER: token[:-2] + "xx"})
        forged_answer = await api.post(path + "/respond", json={"approved": True}, headers={HEADER: "guess"})
        page_html = await api.get("/answer")
        answer = await api.post(path + "/respond", json={"approved": True}, headers={HEADER: token})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
        replay = await api.post(path + "/respond", json={"approved": False}, headers={HEADER: token})
        audit = await api.get("/api/audit", params={"action": "request.respond"})
    assert page == "http://127.0.0.1:8000/answer"
    assert shown.status_code == 200, shown.text
    assert shown.json()["given_to"] == "lee@example.com" and shown.json()["message"] == "Refund 120 USD?"
    assert shown.json()["status"] == "pending" and "link_tokens" not in shown.json()
    for refused in (forged, forged_answer):
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "link_invalid"
    assert (
        page_html.status_code == 200 and "script-src 'self'" in page_html.headers["content-security-policy"]
    )
    assert answer.status_code == 200 and answer.json()["status"] == "approved"
    assert done.output == "refunded by lee@example.com via email"
    assert replay.status_code == 409 and replay.json()["error"]["code"] == "request_already_answered"
    assert "lee@example.com" in replay.json()["error"]["message"]
    # Answers by link are in the audit log as who answered; forged links name no workspace.
    entries = sorted(audit.json()["entries"], key=lambda e: e["id"])
    assert [(e["actor"], e["actor_name"], e["role"], e["status"], e["route"]) for e in entries] == [
        ("link", "lee@example.com", "person", 200, "/api/public/requests/{request_id}/respond"),
        ("link", "lee@example.com", "person", 409, "/api/public/requests/{request_id}/respond"),
    ]
    assert {(e["target"]["request_id"], e["target"]["via"]) for e in entries} == {(request_id, "email")}


async def test_a_link_and_the_inbox_answering_at_once_resume_the_run_once(
    engine: Engine, sink: SmtpSink
) -> None:
    await engine.publish_workflow(approval("refund-race"))
    async with (
        running_worker(engine),
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as api,
    ):
        run = await engine.start_run("refund-race", {"amount": 120})
        _page, request_id, token = await mailed_link(engine, sink, run.id)
        by_link, in_app = await asyncio.gather(
            api.post(
                f"/api/public/requests/{request_id}/respond", json={"approved": True}, headers={HEADER: token}
            ),
            api.post(
                f"/api/requests/{request_id}/respond", json={"approved": True, "responded_by": "ops-team"}
            ),
        )
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert sorted([by_link.status_code, in_app.status_code]) == [200, 409]
    winner = "lee@example.com via email" if by_link.status_code == 200 else "ops-team via in_app"
    assert done.output == f"refunded by {winner}"
    answers = [s for s in await engine.list_steps(run.id) if s.node_id == "ask" and s.status == "completed"]
    assert len(answers) == 2, "one step asked, one took the answer"


async def test_an_expired_link_gets_401_and_changes_nothing(engine: Engine, sink: SmtpSink) -> None:
    await engine.publish_workflow(approval("refund-late", wait="1s", timeout_action="continue"))
    async with (
        running_worker(engine),
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as api,
    ):
        run = await engine.start_run("refund-late", {"amount": 120})
        _page, request_id, token = await mailed_link(engine, sink, run.id)
        done = await until(engine, run.id, lambda r: r.status.is_terminal, timeout=30)
        late = await api.post(
            f"/api/public/requests/{request_id}/respond", json={"approved": True}, headers={HEADER: token}
        )
        read = await api.get(f"/api/public/requests/{request_id}", headers={HEADER: token})
    assert done.output == "nobody"
    for answer in (late, read):
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "link_expired", answer.text
    assert (await engine.requests.get(UUID(request_id)))["status"] == "expired"


async def test_the_webhook_channel_posts_the_request_with_a_token_that_answers_it(engine: Engine) -> None:
    with RecordingServer() as outside:
        await engine.publish_workflow(
            approval(
                "refund-hook", assignees=[], channels=["in_app", "webhook"], webhook=outside.url + "/ops"
            )
        )
        async with (
            running_worker(engine),
            serve(create_app(engine)) as base,
            httpx.AsyncClient(base_url=base) as api,
        ):
            run = await engine.start_run("refund-hook", {"amount": 120})
            assert await asyncio.to_thread(outside.wait_for, lambda s: len(s.calls("/ops")) >= 1, 15)
            (posted,) = outside.calls("/ops")
            data = posted.body["data"]
            answer = await api.post(
                urlsplit(data["respond_url"]).path, json={"approved": True}, headers={HEADER: data["token"]}
            )
            done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert posted.body["kind"] == "request" and posted.key == posted.body["id"]
    assert (data["kind"], data["message"], data["run_id"]) == ("approval", "Refund 120 USD?", str(run.id))
    assert answer.status_code == 200, answer.text
    assert done.output == f"refunded by {outside.url}/ops via webhook"


@pytest.mark.parametrize(
    ("ask", "words"),
    [
        ({"channels": ["webhook"]}, "'webhook' goes with the webhook channel, which needs it"),
        ({"webhook": "https://ops.example.com/hook"}, "'webhook' goes with the webhook channel"),
        ({"channels": ["webhook"], "webhook": "ftp://ops.example.com"}, "http or https"),
    ],
)
async def test_a_webhook_channel_is_checked_at_publish(
    engine: Engine, ask: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        await engine.publish_workflow(approval("bad-hook", **ask))
    assert words in str(info.value.info.details["errors"]), info.value.info.details


def slack_press(
    value: str,
    *,
    secret: str = SLACK_SECRET,
    age: float = 0.0,
    user: str = "lee",
    response_url: str | None = None,
) -> tuple[bytes, dict[str, str]]:
    """A button press as Slack posts it: a form with a JSON payload, signed (v0)."""
    payload = {
        "type": "block_actions",
        "user": {"id": "U1", "username": user},
        "actions": [{"action_id": "x", "value": value}],
        "response_url": response_url,
    }
    body = urlencode({"payload": json.dumps(payload)}).encode()
    timestamp = str(int(time.time() - age))
    digest = hmac.new(secret.encode(), b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": f"v0={digest}",
    }
    return body, headers


async def test_slack_buttons_answer_the_request_as_who_pressed_and_forged_presses_change_nothing(
    engine: Engine,
) -> None:
    with RecordingServer() as slack:
        await engine.publish_workflow(
            approval(
                "refund-slack",
                assignees=["lee@example.com"],
                channels=["in_app", "slack"],
                slack=slack.url + "/hooks/T1/B1/x",
            )
        )
        path = "/api/public/slack/interactions"
        async with (
            running_worker(engine),
            serve(create_app(engine)) as base,
            httpx.AsyncClient(base_url=base) as api,
        ):
            run = await engine.start_run("refund-slack", {"amount": 120})
            assert await asyncio.to_thread(slack.wait_for, lambda s: len(s.calls("/hooks/T1/B1/x")) >= 1, 15)
            (posted,) = slack.calls("/hooks/T1/B1/x")
            buttons = {e["action_id"]: e for e in posted.body["blocks"][1]["elements"]}
            approve = buttons["approve"]["value"]
            forged = await api.post(
                path,
                content=slack_press(approve, secret="another")[0],
                headers=slack_press(approve, secret="another")[1],
            )
            old_body, old_headers = slack_press(approve, age=600)
            replayed = await api.post(path, content=old_body, headers=old_headers)
            tampered_body, tampered_headers = slack_press(approve)
            tampered = await api.post(
                path, content=tampered_body.replace(b"lee", b"eve"), headers=tampered_headers
            )
            still = (await engine.get_run(run.id)).status
            opened = await api.post(path, content=slack_press("")[0], headers=slack_press("")[1])
            body, headers = slack_press(approve, response_url=slack.url + "/respond/T1")
            pressed = await api.post(path, content=body, headers=headers)
            done = await until(engine, run.id, lambda r: r.status.is_terminal)
            body, headers = slack_press(buttons["reject"]["value"], user="eve")
            again = await api.post(path, content=body, headers=headers)
            audit = await api.get("/api/audit", params={"action": "request.respond"})
    assert posted.body["text"] == "Refund 120 USD?" and "url" in buttons["open"]
    for refused in (forged, replayed, tampered):
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "slack_signature_invalid", (
            refused.text
        )
    assert still == "waiting", "a refused press changes nothing"
    assert opened.status_code == 200 and opened.json()["status"] == "ignored"
    assert pressed.status_code == 200, pressed.text
    assert pressed.json() == {"status": "approved", "responded_by": "slack:lee"}
    assert done.output == "refunded by slack:lee via slack"
    (told,) = slack.calls("/respond/T1")  # the message now says who decided
    assert told.body == {"replace_original": True, "text": "Approved by lee."}
    assert again.status_code == 409 and again.json()["error"]["code"] == "request_already_answered"
    entries = sorted(audit.json()["entries"], key=lambda e: e["id"])
    assert [(e["actor_name"], e["status"], e["route"], e["target"]["via"]) for e in entries] == [
        ("slack:lee", 200, path, "slack"),
        ("slack:eve", 409, path, "slack"),
    ], "signed presses only; the refused ones named no request"


async def test_slack_callbacks_are_refused_without_a_signing_secret(database_url: str) -> None:
    eng = await Engine.connect(make_settings(database_url), migrate_schema=False)
    try:
        async with serve(create_app(eng)) as base, httpx.AsyncClient(base_url=base) as api:
            body, headers = slack_press("x|y|approve")
            answer = await api.post("/api/public/slack/interactions", content=body, headers=headers)
            as_json = await api.post("/api/public/slack/interactions", json={"payload": "{}"})
    finally:
        await eng.close()
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "slack_not_configured"
    assert as_json.status_code == 404
