"""Runs record the conversation they answer (issue 15, seed 002's run list): a start takes
``conversation: {id, channel, title}``, runs show it, and ``GET /api/runs`` finds them by
``conversation_id`` and ``channel`` through indexes that match the filters' expressions. A
malformed conversation is a 422 naming the field; an idempotent start counts it in what was
asked; a message to an employee is a conversation of channel ``api``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.core.errors import AgentflowError, ConfigError
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.run_filters import parse_run_filter
from agentflow.engine import Engine
from agentflow.store import run_search
from tests.support.http_server import serve

FLOW = {"name": "answer", "kind": "structured", "nodes": [{"id": "done", "type": "finish", "output": "ok"}]}
RUNS = "/api/ai/workflows/answer/runs"


async def start(api: httpx.AsyncClient, conversation: Any, **extra: Any) -> httpx.Response:
    return await api.post(RUNS, json={"payload": {}, "conversation": conversation, **extra})


async def ids(api: httpx.AsyncClient, **params: str) -> set[str]:
    listed = await api.get("/api/runs", params=params)
    assert listed.status_code == 200, listed.text
    return {run["id"] for run in listed.json()["runs"]}


async def test_runs_carry_their_conversation_and_are_found_by_its_id_and_channel(engine: Engine) -> None:
    await engine.publish_workflow(FLOW)
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as api:
        chat = await start(api, {"id": "C-1", "channel": "slack", "title": "Refund for Acme"})
        chat_again = await start(api, {"id": "C-1", "channel": "slack"})
        mail = await start(api, {"id": "M-9", "channel": "email"})
        plain = await start(api, None)
        by_id = await ids(api, conversation_id="C-1")
        by_channel = await ids(api, channel="email")
        both = await ids(api, conversation_id="C-1", channel="email")
        shown = (await api.get(f"{RUNS}/{chat.json()['id']}")).json()
        refused = {
            "channel": await start(api, {"id": "C-2", "channel": "Slack!"}),
            "no id": await start(api, {"channel": "slack"}),
            "extra field": await start(api, {"id": "C-2", "channel": "slack", "user": "lee"}),
        }
    assert [r.status_code for r in (chat, chat_again, mail, plain)] == [201] * 4
    assert shown["conversation"] == {"id": "C-1", "channel": "slack", "title": "Refund for Acme"}
    assert plain.json()["conversation"] is None
    assert by_id == {chat.json()["id"], chat_again.json()["id"]}
    assert by_channel == {mail.json()["id"]}
    assert both == set()
    for name, answer in refused.items():
        assert answer.status_code == 422, (name, answer.text)
        assert "conversation" in answer.text, name
    assert await engine.db.pool.fetchval("SELECT count(*) FROM runs") == 4, "a refused start writes nothing"


async def test_the_filters_match_their_indexes(engine: Engine) -> None:
    """With sequential scans off and the other conversation index and the newest-first one out
    of the way (dropped in a transaction that is rolled back), the planner answers each filter from its own partial
    index, with the filter's expression as the index condition: the filter's SQL and the
    index's expression agree (a mismatch would leave it a mere filter)."""
    await engine.publish_workflow(FLOW)
    await engine.start_run_once("answer", {}, conversation={"id": "C-1", "channel": "slack"})
    plans: dict[str, str] = {}
    async with engine.db.pool.acquire() as conn:
        await conn.execute("SET enable_seqscan = off")
        for name, value, index, other in (
            ("conversation_id", "C-1", "runs_by_conversation", "runs_by_channel"),
            ("channel", "slack", "runs_by_channel", "runs_by_conversation"),
        ):
            tr = conn.transaction()
            await tr.start()
            try:
                await conn.execute(f"DROP INDEX {other}, runs_newest")

                class Explaining:
                    """The connection, each query explained before it runs."""

                    async def fetch(self, sql: str, *args: Any, _name: str = name) -> list[Any]:
                        rows = await conn.fetch("EXPLAIN " + sql, *args)
                        plans[_name] = "\n".join(r[0] for r in rows)
                        return list(await conn.fetch(sql, *args))

                wanted = parse_run_filter([(name, value)])
                found = await run_search.search_runs(Explaining(), DEFAULT_WORKSPACE, wanted)  # type: ignore[arg-type]
                assert len(found) == 1, name
                assert f"using {index} on runs" in plans[name], plans[name]
            finally:
                await tr.rollback()
        await conn.execute("RESET enable_seqscan")
    expression = {
        "conversation_id": "(conversation ->> 'id'::text) =",
        "channel": "(conversation ->> 'channel'::text) =",
    }
    for name, plan in plans.items():
        cond = [line for line in plan.splitlines() if "Index Cond" in line]
        assert cond and expression[name] in cond[0], plan


async def test_an_idempotent_start_counts_the_conversation_and_bad_input_is_named(engine: Engine) -> None:
    await engine.publish_workflow(FLOW)
    first = await engine.start_run_once("answer", {}, conversation={"id": "C-7", "channel": "web"},
                                        idempotency_key="k-7")  # fmt: skip
    again = await engine.start_run_once("answer", {}, conversation={"id": "C-7", "channel": "web"},
                                        idempotency_key="k-7")  # fmt: skip
    with pytest.raises(AgentflowError) as other:
        await engine.start_run_once("answer", {}, conversation={"id": "C-8", "channel": "web"},
                                    idempotency_key="k-7")  # fmt: skip
    with pytest.raises(ConfigError) as bad:
        await engine.start_run_once("answer", {}, conversation={"id": "C-9", "channel": "x" * 60})
    assert again.replayed and again.run.id == first.run.id
    assert other.value.code == "idempotency_key_reused"
    assert (
        bad.value.code == "conversation_invalid" and bad.value.info.details["field"] == "conversation.channel"
    )


async def test_a_message_to_an_employee_is_a_conversation_of_the_api(engine: Engine) -> None:
    await engine.publish_workflow(
        {"name": "helper", "kind": "employee", "title": "Helper", "prompt": "You help the team."}
    )
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as api:
        sent = await api.post(
            "/api/employees/helper/messages", json={"message": "Hi", "conversation_id": "talk-1"}
        )
        listed = await ids(api, conversation_id="talk-1", channel="api")
    assert sent.status_code == 202, sent.text
    assert listed == {sent.json()["run_id"]}
