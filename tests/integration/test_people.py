"""People and roles (issue 14): a request for a role is for everyone who holds it when it is
made; the email channel mails each of them a link that answers as them; a role nobody holds
fails the step rather than open the request to anyone; the API sets, lists and removes people."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.core.errors import ConfigError
from agentflow.engine import Engine
from agentflow.integrations.smtp_sink import SmtpSink
from tests.conftest import make_settings
from tests.support.agents import running_worker, until
from tests.support.http_server import serve


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[SmtpSink]:
    with SmtpSink(jsonl_path=tmp_path / "mail.jsonl") as started:
        yield started


@pytest.fixture
async def engine(database_url: str, sink: SmtpSink) -> AsyncIterator[Engine]:
    settings = make_settings(database_url, smtp_url=sink.url, smtp_from="agentflow@example.com")
    eng = await Engine.connect(settings, migrate_schema=False)
    yield eng
    await eng.close()


def approval(name: str, assignees: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "structured",
        "nodes": [
            {"id": "ask", "type": "user_input", "message": "Pay invoice {{ payload.n }}?",
             "assignees": assignees, "channels": ["in_app", "email"]},
            {"id": "paid", "type": "finish", "output": "paid, {{ input.responded_by }} said so"},
            {"id": "no", "type": "finish", "output": "not paid"},
        ],
        "edges": [{"from": "ask", "port": "approved", "to": "paid"}, {"from": "ask", "port": "rejected", "to": "no"}],
    }  # fmt: skip


async def test_a_request_for_a_role_is_for_everyone_who_holds_it_and_mails_those_with_an_address(
    engine: Engine, sink: SmtpSink
) -> None:
    await engine.people.set("lee", {"name": "Lee", "email": "lee@example.com", "roles": ["finance"]})
    await engine.people.set("mo", {"name": "Mo", "roles": ["finance", "ops"]})
    await engine.people.set("ana", {"email": "ana@example.com", "roles": ["ops"]})
    await engine.publish_workflow(approval("invoice", ["role:finance", "ana", "zed@example.com"]))
    async with running_worker(engine):
        run = await engine.start_run("invoice", {"n": 7})
        await until(engine, run.id, lambda r: r.status == "waiting")
        (request,) = await engine.requests.list(run_id=run.id)
        for _ in range(200):
            if len(sink.messages) >= 3:
                break
            await asyncio.sleep(0.05)
        with pytest.raises(ConfigError) as outsider:
            await engine.requests.respond(request["id"], approved=True, responded_by="ops-bot")
        answered = await engine.requests.respond(request["id"], approved=True, responded_by="mo")
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert request["assignees"] == ["lee", "mo", "ana", "zed@example.com"]
    assert sorted(m.rcpt_tos[0] for m in sink.messages) == [
        "ana@example.com",
        "lee@example.com",
        "zed@example.com",
    ]
    assert outsider.value.info.code == "responder_not_assigned"
    assert answered["responded_by"] == "mo" and done.output == "paid, mo said so"
    step = next(s for s in await engine.list_steps(run.id) if s.node_id == "ask")
    assert step.input["roles"] == {"finance": ["lee", "mo"]}


async def test_a_role_nobody_holds_fails_the_step_instead_of_opening_the_request(engine: Engine) -> None:
    await engine.publish_workflow(approval("nobody", ["role:legal"]))
    async with running_worker(engine):
        run = await engine.start_run("nobody", {"n": 1})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "failed" and done.error is not None
    assert done.error["code"] == "role_has_no_people" and "legal" in done.error["message"]
    assert await engine.requests.list(run_id=run.id, status=None) == []


async def test_the_api_sets_lists_and_removes_people(engine: Engine) -> None:
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as api:
        put = await api.put(
            "/api/people/lee", json={"name": "Lee", "email": "lee@example.com", "roles": ["finance"]}
        )
        await api.put("/api/people/mo", json={"roles": ["ops"]})
        finance = (await api.get("/api/people", params={"role": "finance"})).json()
        bad = await api.put("/api/people/Lee!", json={"email": "nope", "roles": ["Bad Role"], "boss": "x"})
        sneaky = await api.put("/api/people/eve", json={"workspace_id": "x"})
        gone = await api.delete("/api/people/mo")
        again = await api.delete("/api/people/mo")
        missing = await api.get("/api/people/mo")
    assert put.status_code == 200 and put.json()["roles"] == ["finance"]
    assert [p["handle"] for p in finance["people"]] == ["lee"]
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "person_invalid"
    paths = sorted(e["path"] for e in bad.json()["error"]["details"]["errors"])
    assert paths == ["boss", "email", "handle", "roles[0]"]
    assert sneaky.status_code == 422
    assert gone.status_code == 204 and again.status_code == 404 and missing.status_code == 404
