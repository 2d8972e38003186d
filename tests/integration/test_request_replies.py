"""Free-text replies to requests (issue 14): a request's email carries a reply address of its
own; a reply posted to ``/api/public/inbound/email`` as it arrived is kept once, read by the
workflow's model (the scripted one here: the real one in ``tests/realmodel``) and, when
relevant, answers the request through the same conditional statement as every channel.
Uncertain readings, readings that do not fit, and replies from someone else are held for a
person; filtered ones and automatic replies are ignored; a reply after the answer is late.
Email goes through a real SMTP server and the reply over HTTP."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from email.message import EmailMessage
from email.policy import SMTP
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import orjson
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentflow.api.app import create_app
from agentflow.core.chat import Message, ModelRequest
from agentflow.engine import Engine
from agentflow.integrations.smtp_sink import ReceivedMessage, SmtpSink
from agentflow.llm.base import ModelError
from agentflow.llm.scripted import ScriptedProvider, latest_user_text
from agentflow.runtime import reply_reader, tracing
from tests.conftest import make_settings
from tests.integration.test_request_links import approval
from tests.support.agents import agent_workflow, calls, replies, running_worker, until
from tests.support.http_server import serve

REPLY_TO = re.compile(r"^replies\+[a-z2-7]{26}\.[a-z2-7]{24}@in\.example\.com$")
RAW = {"Content-Type": "message/rfc822"}

# What the scripted model reads in a reply, by the words in it.
READINGS: dict[str, dict[str, Any]] = {
    "go ahead": {"score": 0.95, "approved": True, "response": None, "reason": "the person approves"},
    "too expensive": {"score": 0.9, "approved": False, "response": None, "reason": "too expensive"},
    "let me think": {"score": 0.5, "approved": None, "response": None, "reason": "undecided"},
    "lunch": {"score": 0.05, "approved": None, "response": None, "reason": "another topic"},
    "sounds good": {"score": 0.8, "approved": None, "response": None, "reason": "positive, no decision"},
}


class Reader:
    """The scripted model: records what it was asked, answers by ``READINGS``."""

    def __init__(self) -> None:
        self.asked: list[ModelRequest] = []
        self.provider = ScriptedProvider(self.respond)

    def respond(self, request: ModelRequest) -> Message:
        self.asked.append(request)
        reply = latest_user_text(request).split("## Reply from", 1)[1]
        if "model down" in reply:
            raise ModelError("model_unavailable", "the vendor is down", retryable=True)
        reading = next(r for words, r in READINGS.items() if words in reply.lower())
        return Message("assistant", orjson.dumps(reading).decode())


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[SmtpSink]:
    sink = SmtpSink(jsonl_path=tmp_path / "mail.jsonl")
    sink.start()
    yield sink
    sink.stop()


@pytest.fixture
async def engine(database_url: str, sink: SmtpSink) -> AsyncIterator[Engine]:
    settings = make_settings(
        database_url, smtp_url=sink.url, smtp_from="agentflow@example.com", reply_to="replies@in.example.com"
    )
    eng = await Engine.connect(settings, migrate_schema=False)
    yield eng
    await eng.close()


async def mailed(engine: Engine, sink: SmtpSink, run_id: UUID, count: int = 1) -> ReceivedMessage:
    await until(engine, run_id, lambda r: r.status == "waiting", timeout=20)
    for _ in range(300):
        if len(sink.messages) >= count:
            break
        await asyncio.sleep(0.05)
    return sink.messages[count - 1]


def reply(to: ReceivedMessage, text: str, *, sender: str = "lee@example.com", **headers: str) -> bytes:
    """A reply as a mail program writes it: the person's words above the quoted request."""
    message = EmailMessage(policy=SMTP)
    message["From"] = f"Lee <{sender}>"
    message["To"] = to.headers["Reply-To"]
    message["Subject"] = f"Re: {to.subject}"
    message["Message-ID"] = f"<{abs(hash((text, sender)))}@mail.example.com>"
    message["In-Reply-To"] = to.message_id
    for name, value in headers.items():
        message[name.replace("_", "-")] = value
    quoted = "\n".join(f"> {line}" for line in to.body.splitlines())
    message.set_content(f"{text}\n\nOn Mon, 2 Nov 2026 at 10:00, agentflow wrote:\n{quoted}\n")
    return message.as_bytes()


async def replies_of(api: httpx.AsyncClient, request_id: str, count: int) -> list[dict[str, Any]]:
    """The request's replies once ``count`` of them have been read."""
    for _ in range(300):
        found = (await api.get(f"/api/requests/{request_id}/replies")).json()
        if sum(1 for r in found if r["outcome"] is not None) >= count:
            return list(found)
        await asyncio.sleep(0.05)
    raise AssertionError(f"replies not read: {found}")


async def test_an_emailed_reply_is_read_by_the_model_and_answers_the_request(
    engine: Engine, sink: SmtpSink
) -> None:
    await engine.publish_workflow(approval("reply-yes"))
    reader = Reader()
    async with (
        running_worker(engine, model=reader.provider),
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as api,
    ):
        run = await engine.start_run("reply-yes", {"amount": 120})
        mail = await mailed(engine, sink, run.id)
        raw = reply(mail, "Yes, go ahead.")
        first = await api.post("/api/public/inbound/email", content=raw, headers=RAW)
        again = await api.post("/api/public/inbound/email", content=raw, headers=RAW)
        done = await until(engine, run.id, lambda r: r.status.is_terminal, timeout=20)
        (read,) = await replies_of(api, first.json()["request_id"], 1)
        request = (await api.get(f"/api/requests/{read['request_id']}")).json()
    assert REPLY_TO.fullmatch(mail.headers["Reply-To"]), mail.headers
    assert "Or reply to this email" in mail.body
    assert first.status_code == 202 and first.json()["new"] is True, first.text
    assert (
        again.status_code == 202 and again.json()["new"] is False and again.json()["id"] == first.json()["id"]
    )
    assert done.output == "refunded by lee@example.com via email"
    assert (read["label"], read["score"], read["outcome"]) == ("relevant", pytest.approx(0.95), "answered")
    assert read["text"] == "Yes, go ahead." and read["sender"] == "lee@example.com"
    assert read["verdict"]["reason"] == "the person approves" and read["verdict"]["model"].startswith(
        "scripted"
    )
    assert (request["status"], request["responded_by"], request["responded_via"]) == (
        "approved", "lee@example.com", "email",
    )  # fmt: skip
    (asked,) = reader.asked  # once, although the message came twice
    assert "Refund 120 USD?" in asked.messages[-1].content and "> Refund" not in asked.messages[-1].content


async def test_uncertain_replies_are_held_and_filtered_ones_ignored_until_one_decides(
    engine: Engine, sink: SmtpSink
) -> None:
    await engine.publish_workflow(approval("reply-mixed"))
    reader = Reader()
    async with (
        running_worker(engine, model=reader.provider),
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as api,
    ):
        run = await engine.start_run("reply-mixed", {"amount": 120})
        mail = await mailed(engine, sink, run.id)
        inbound = "/api/public/inbound/email"
        for text, extra in (
            ("Let me think about it.", {}),
            ("Lunch on Friday?", {}),
            ("Sounds good!", {}),  # relevant, but no decision: held
            ("I am out of office until Monday.", {"Auto_Submitted": "auto-replied"}),
            ("Yes, go ahead.", {"sender": "mallory@example.com"}),  # someone else
        ):
            sender = extra.pop("sender", "lee@example.com")
            posted = await api.post(inbound, content=reply(mail, text, sender=sender, **extra), headers=RAW)
            assert posted.status_code == 202, posted.text
        read = await replies_of(api, posted.json()["request_id"], 5)
        held = (await api.get("/api/replies", params={"outcome": "held"})).json()
        pending = await engine.get_run(run.id)
        decided = await api.post(inbound, content=reply(mail, "No, too expensive."), headers=RAW)
        done = await until(engine, run.id, lambda r: r.status.is_terminal, timeout=20)
    by_text = {r["text"].split()[0]: r for r in read}
    assert (by_text["Let"]["label"], by_text["Let"]["outcome"]) == ("uncertain", "held")
    assert (by_text["Lunch"]["label"], by_text["Lunch"]["outcome"]) == ("filtered", "ignored")
    assert (by_text["Sounds"]["label"], by_text["Sounds"]["outcome"]) == ("relevant", "held")
    assert by_text["Sounds"]["verdict"]["held_because"] == "an approval needs 'approved': true or false"
    assert (by_text["I"]["label"], by_text["I"]["outcome"], by_text["I"]["score"]) == (
        "filtered",
        "ignored",
        None,
    )
    assert (by_text["Yes,"]["label"], by_text["Yes,"]["outcome"]) == ("relevant", "held")
    assert "mallory@example.com" in by_text["Yes,"]["verdict"]["held_because"]
    assert {r["text"].split()[0] for r in held} == {"Let", "Sounds", "Yes,"}
    assert pending.status == "waiting", "nothing answered the request before the decision"
    assert len(reader.asked) == 5, "the automatic reply never reached the model"
    assert decided.status_code == 202
    assert done.output == "no"
    request = await engine.requests.get(UUID(decided.json()["request_id"]))
    assert (request["status"], request["reason"], request["responded_via"]) == (
        "rejected",
        "too expensive",
        "email",
    )


async def test_forged_and_unreadable_replies_are_refused_and_keep_nothing(
    engine: Engine, sink: SmtpSink
) -> None:
    await engine.publish_workflow(approval("reply-forged"))
    async with (
        running_worker(engine, model=Reader().provider),
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as api,
    ):
        run = await engine.start_run("reply-forged", {"amount": 120})
        mail = await mailed(engine, sink, run.id)
        address = mail.headers["Reply-To"]
        request_id = (await engine.requests.list(run_id=run.id))[0]["id"]
        forged = mail.headers["Reply-To"].replace(address[-30:-20], "a" * 10)
        inbound = "/api/public/inbound/email"
        answers = {
            "forged token": await api.post(
                inbound, content=reply(mail, "Yes, go ahead.").replace(address.encode(), forged.encode()),
                headers=RAW,
            ),
            "no reply address": await api.post(
                inbound, content=reply(mail, "Yes, go ahead.").replace(address.encode(), b"ops@example.com"),
                headers=RAW,
            ),
            "no sender": await api.post(inbound, content=b"Subject: hi\r\n\r\nYes, go ahead.", headers=RAW),
            "as JSON": await api.post(inbound, json={"text": "Yes, go ahead."}),
            "as text": await api.post(inbound, content=reply(mail, "Yes"), headers={"Content-Type": "text/plain"}),
        }  # fmt: skip
        token = address.split(".")[1].split("@")[0]
        as_link = await api.get(
            f"/api/public/requests/{request_id}", headers={"X-Agentflow-Request-Token": token}
        )
        listed = (await api.get(f"/api/requests/{request_id}/replies")).json()
        state = await engine.get_run(run.id)
    codes = {k: (v.status_code, v.json()["error"]["code"]) for k, v in answers.items()}
    assert codes == {
        "forged token": (401, "reply_address_invalid"),
        "no reply address": (401, "reply_address_invalid"),
        "no sender": (422, "email_unreadable"),
        "as JSON": (422, "email_unreadable"),
        "as text": (415, "unsupported_media_type"),
    }
    assert as_link.status_code == 401 and as_link.json()["error"]["code"] == "link_invalid"
    assert listed == [] and state.status == "waiting"


async def test_a_reply_after_the_answer_is_late_and_a_failing_model_is_asked_again(
    engine: Engine, sink: SmtpSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reply_reader, "RETRY_BASE", 0.05)
    await engine.publish_workflow(approval("reply-late"))
    reader = Reader()
    async with (
        running_worker(engine, model=reader.provider),
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as api,
    ):
        runs = [await engine.start_run("reply-late", {"amount": 120}) for _ in range(2)]
        mails = [await mailed(engine, sink, runs[0].id, 1), await mailed(engine, sink, runs[1].id, 2)]
        mails.sort(key=lambda m: m.headers["X-Agentflow-Run"] != str(runs[0].id))
        first_request = (await engine.requests.list(run_id=runs[0].id))[0]["id"]
        await engine.requests.respond(first_request, approved=True, responded_by="ops-team")
        late = await api.post(
            "/api/public/inbound/email", content=reply(mails[0], "Yes, go ahead."), headers=RAW
        )
        down = await api.post(
            "/api/public/inbound/email", content=reply(mails[1], "Yes, go ahead (model down)."), headers=RAW
        )
        (late_read,) = await replies_of(api, late.json()["request_id"], 1)
        (down_read,) = await replies_of(api, down.json()["request_id"], 1)
        second = await engine.get_run(runs[1].id)
    assert (late_read["outcome"], late_read["label"]) == ("late", None)
    assert "approved by ops-team" in late_read["verdict"]["reason"]
    assert (down_read["outcome"], down_read["label"], down_read["attempts"]) == ("held", "uncertain", 3)
    assert "vendor is down" in down_read["verdict"]["error"]["message"]
    assert sum("model down" in latest_user_text(r) for r in reader.asked) == 3
    assert second.status == "waiting", "a reply no model could read answers nothing"


async def test_a_reply_to_an_agents_approval_email_rejects_the_call_with_the_models_reason(
    engine: Engine, sink: SmtpSink
) -> None:
    await engine.publish_workflow(
        agent_workflow(approvals=["create_task"], approval={"notify": ["lee@example.com"]})
    )
    agent = replies(calls(("create_task", {"title": "Send the guide"})))
    reader = Reader()

    def respond(request: ModelRequest) -> Message:
        # One model for the worker: the reply reader's questions go to the reader.
        return reader.respond(request) if request.output_schema is not None else agent_turn(request)

    async def agent_turn(request: ModelRequest) -> Message:
        answer = await agent.request(request)
        return answer.message

    async with (
        running_worker(engine, model=ScriptedProvider(respond)),
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as api,
    ):
        run = await engine.start_run("meeting-follow-up", {})
        mail = await mailed(engine, sink, run.id)
        posted = await api.post(
            "/api/public/inbound/email", content=reply(mail, "No, too expensive."), headers=RAW
        )
        done = await until(engine, run.id, lambda r: r.status.is_terminal, timeout=20)
        (read,) = await replies_of(api, posted.json()["request_id"], 1)
    assert mail.subject == "Approval needed: create_task (meeting-follow-up)"
    assert (read["label"], read["outcome"]) == ("relevant", "answered")
    request = await engine.requests.get(UUID(posted.json()["request_id"]))
    assert (request["status"], request["reason"], request["responded_by"], request["responded_via"]) == (
        "rejected", "too expensive", "lee@example.com", "email",
    )  # fmt: skip
    assert done.status == "completed" and await engine.tasks.list(run_id=run.id) == [], "the call never ran"
    refused = [s for s in await engine.list_steps(run.id) if s.kind == "agent.tool"]
    assert refused and "too expensive" in str(refused[0].output)


async def test_reading_a_reply_is_a_span_under_its_runs_span_with_the_model_call_inside(
    engine: Engine, sink: SmtpSink, spans: InMemorySpanExporter
) -> None:
    await engine.publish_workflow(approval("reply-traced"))
    reader = Reader()
    async with (
        running_worker(engine, model=reader.provider),
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as api,
    ):
        run = await engine.start_run("reply-traced", {"amount": 80})
        mail = await mailed(engine, sink, run.id)
        posted = await api.post("/api/public/inbound/email", content=reply(mail, "Go ahead."), headers=RAW)
        await until(engine, run.id, lambda r: r.status.is_terminal, timeout=20)
        await replies_of(api, posted.json()["request_id"], 1)
    (read,) = [s for s in spans.get_finished_spans() if s.name == "read reply"]
    attributes = dict(read.attributes or {})
    assert (attributes["agentflow.reply.outcome"], attributes["agentflow.reply.label"]) == (
        "answered",
        "relevant",
    )
    assert attributes["agentflow.reply.via"] == "email" and attributes["agentflow.run.id"] == str(run.id)
    traced = await engine.get_run(run.id)
    assert read.parent is not None
    assert read.parent.span_id == tracing.run_span_context(run.id, traced.trace_parent).span_id
    assert read.context is not None
    asked = [
        s
        for s in spans.get_finished_spans()
        if s.parent is not None and s.parent.span_id == read.context.span_id
    ]
    assert [dict(s.attributes or {})["gen_ai.operation.name"] for s in asked] == ["chat"]
