"""The ``user_input`` node end to end: the run waits durably for a person, the first valid
answer resumes it exactly once, later answers get 409, timeouts follow the declared action."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.core.errors import ConfigError, ConflictError
from agentflow.core.records import RunRecord
from agentflow.engine import Engine
from agentflow.store import inbox
from tests.support.agents import agent_workflow, calls, replies, running_worker, until

REFUND = {"customer": "Ann", "amount": 120}


def ask(**extra: Any) -> dict[str, Any]:
    return {
        "id": "ask",
        "type": "user_input",
        "message": "Refund {{ payload.amount }} USD to {{ payload.customer }}?",
        **extra,
    }


def flow(name: str, node: dict[str, Any], *ends: tuple[str, str]) -> dict[str, Any]:
    """``node`` then one finish per (port, output)."""
    finishes = [{"id": f"on_{port}", "type": "finish", "output": output} for port, output in ends]
    edges = [{"from": "ask", "port": port, "to": f"on_{port}"} for port, _ in ends]
    return {"name": name, "kind": "structured", "nodes": [node, *finishes], "edges": edges}


async def asked(engine: Engine, run_id: UUID) -> dict[str, Any]:
    """The run's pending request, once the run waits for it."""
    await until(engine, run_id, lambda r: r.status == "waiting" and r.status_reason == "awaiting_event")
    (request,) = await engine.requests.list(run_id=run_id)
    return request


async def ended(engine: Engine, run_id: UUID) -> RunRecord:
    return await until(engine, run_id, lambda r: r.status.is_terminal)


APPROVAL = flow(
    "refund-approval",
    ask(assignees=["lee", "{{ payload.customer | lower }}-manager"]),
    ("approved", "refunded by {{ input.responded_by }}"),
    ("rejected", "declined: {{ input.reason }}"),
)


async def test_an_approval_waits_for_the_first_answer_and_a_second_gets_409(engine: Engine) -> None:
    await engine.publish_workflow(APPROVAL)
    async with running_worker(engine):
        run = await engine.start_run("refund-approval", REFUND)
        request = await asked(engine, run.id)
        assert request["message"] == "Refund 120 USD to Ann?"
        assert request["assignees"] == ["lee", "ann-manager"] and request["kind"] == "approval"
        assert await engine.requests.list(assignee="lee") and not await engine.requests.list(assignee="sam")
        with pytest.raises(ConfigError, match="not sam") as refused:
            await engine.requests.respond(request["id"], approved=True, responded_by="sam")
        assert refused.value.code == "responder_not_assigned"
        with pytest.raises(ConfigError) as invalid:
            await engine.requests.respond(request["id"], responded_by="lee")
        assert invalid.value.code == "response_invalid"
        answered = await engine.requests.respond(request["id"], approved=True, responded_by="lee")
        assert answered["status"] == "approved" and answered["responded_via"] == "in_app"
        with pytest.raises(ConflictError, match="already approved by lee") as again:
            await engine.requests.respond(request["id"], approved=False, responded_by="ann-manager")
        assert again.value.code == "request_already_answered"
        done = await ended(engine, run.id)
    assert done.status == "completed" and done.output == "refunded by lee"
    steps = [s for s in await engine.list_steps(run.id) if s.node_id == "ask"]
    assert [s.output["outcome"] if "outcome" in s.output else s.output["status"] for s in steps] == [  # type: ignore[operator,index]
        "pending",
        "approved",
    ]


async def test_a_rejection_takes_the_rejected_port_with_the_reason(engine: Engine) -> None:
    await engine.publish_workflow(APPROVAL)
    async with running_worker(engine):
        run = await engine.start_run("refund-approval", REFUND)
        request = await asked(engine, run.id)
        await engine.requests.respond(
            request["id"], approved=False, reason="over the limit", responded_by="lee"
        )
        done = await ended(engine, run.id)
    assert done.output == "declined: over the limit"


async def test_many_answers_at_once_resume_the_run_exactly_once(engine: Engine) -> None:
    await engine.publish_workflow(APPROVAL)
    async with running_worker(engine):
        run = await engine.start_run("refund-approval", REFUND)
        request = await asked(engine, run.id)
        tries = [
            engine.requests.respond(request["id"], approved=n % 2 == 0, responded_by="lee") for n in range(12)
        ]
        results = await asyncio.gather(*tries, return_exceptions=True)
        done = await ended(engine, run.id)
    wins = [r for r in results if isinstance(r, dict)]
    assert len(wins) == 1 and all(isinstance(r, ConflictError) for r in results if r not in wins)
    answers = await engine.db.pool.fetchval(
        "SELECT count(*) FROM run_inbox WHERE run_id = $1 AND kind = 'request'", run.id
    )
    assert answers == 1, "one answer reached the run"
    expected = "refunded by lee" if wins[0]["status"] == "approved" else "declined: None"
    assert done.output == expected


async def test_a_form_answer_is_checked_against_its_schema_and_flows_on(engine: Engine) -> None:
    form = {"type": "object", "properties": {"amount": {"type": "integer", "maximum": 500}},
            "required": ["amount"], "additionalProperties": False}  # fmt: skip
    await engine.publish_workflow(
        flow("refund-amount", ask(interaction="input", form=form), ("result", "{{ input.response.amount }}"))
    )
    async with running_worker(engine):
        run = await engine.start_run("refund-amount", REFUND)
        request = await asked(engine, run.id)
        assert request["spec"] == {"form": form}
        with pytest.raises(ConfigError, match="amount: 900 is greater than the maximum of 500"):
            await engine.requests.respond(request["id"], response={"amount": 900})
        assert (await engine.requests.get(request["id"]))["status"] == "pending", "a bad answer loses nothing"
        await engine.requests.respond(request["id"], response={"amount": 80})
        done = await ended(engine, run.id)
    assert done.output == 80


async def test_a_selection_takes_one_of_its_options_and_a_review_its_edit(engine: Engine) -> None:
    options = [{"value": "refund", "label": "Refund"}, {"value": "credit", "label": "Store credit"}]
    await engine.publish_workflow(
        flow(
            "refund-choice", ask(interaction="selection", options=options), ("result", "{{ input.response }}")
        )
    )
    await engine.publish_workflow(
        flow("refund-review", ask(interaction="review", proposed={"amount": "{{ payload.amount }}"}),
             ("approved", "{{ input.response.amount }}"), ("rejected", "no"))
    )  # fmt: skip
    async with running_worker(engine):
        choice = await engine.start_run("refund-choice", REFUND)
        review = await engine.start_run("refund-review", REFUND)
        pick = await asked(engine, choice.id)
        with pytest.raises(ConfigError, match="one of"):
            await engine.requests.respond(pick["id"], response="cash")
        await engine.requests.respond(pick["id"], response="credit")
        proposed = await asked(engine, review.id)
        assert proposed["spec"] == {"proposed": {"amount": 120}}
        await engine.requests.respond(proposed["id"], approved=True, response={"amount": 90})
        assert (await ended(engine, choice.id)).output == "credit"
        assert (await ended(engine, review.id)).output == 90


@pytest.mark.parametrize(
    ("extra", "status", "output"),
    [
        ({"timeout_action": "fail"}, "failed", None),
        ({"timeout_action": "continue"}, "completed", "nobody answered"),
        ({"timeout_action": "default_response", "default_response": "auto"}, "completed", "approved: auto"),
    ],
)
async def test_a_timeout_follows_the_declared_action(
    engine: Engine, extra: dict[str, Any], status: str, output: str | None
) -> None:
    node = ask(wait="1s", **extra)
    ends = [("approved", "approved: {{ input.response }}"), ("rejected", "rejected")]
    if extra["timeout_action"] == "continue":
        ends.append(("timeout", "nobody answered"))
    await engine.publish_workflow(flow("refund-timeout", node, *ends))
    async with running_worker(engine):
        run = await engine.start_run("refund-timeout", REFUND)
        request = await asked(engine, run.id)
        done = await until(engine, run.id, lambda r: r.status.is_terminal, timeout=30)
        with pytest.raises(ConflictError) as late:
            await engine.requests.respond(request["id"], approved=True)
    assert late.value.code == "request_already_answered", "an answer after the timeout is refused"
    assert done.status == status and done.output == output
    if status == "failed":
        assert done.error["code"] == "request_timed_out"
    assert (await engine.requests.get(request["id"]))["status"] == "expired"


async def test_other_deliveries_wake_the_node_without_being_taken(engine: Engine) -> None:
    await engine.publish_workflow(APPROVAL)
    async with running_worker(engine):
        run = await engine.start_run("refund-approval", REFUND)
        request = await asked(engine, run.id)
        async with engine.db.pool.acquire() as conn:
            await inbox.deliver(conn, run.workspace_id, run.id, "event", {"note": "unrelated"})
        await until(engine, run.id, lambda r: r.step_seq >= 2 and r.status == "waiting")
        pending = await engine.db.pool.fetchval(
            "SELECT count(*) FROM run_inbox WHERE run_id = $1 AND consumed_at IS NULL", run.id
        )
        assert pending == 1, "the node looked and left the delivery in the inbox"
        await engine.requests.respond(request["id"], approved=True, responded_by="lee")
        done = await ended(engine, run.id)
    assert done.output == "refunded by lee"
    looked = [s.output for s in await engine.list_steps(run.id) if s.node_id == "ask"]
    assert [o.get("status") or o.get("outcome") for o in looked] == ["pending", "pending", "approved"]  # type: ignore[union-attr]


async def test_the_api_lists_and_answers_requests(engine: Engine) -> None:
    await engine.publish_workflow(APPROVAL)
    app = create_app(engine)
    async with (
        running_worker(engine),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client,
    ):
        run = await engine.start_run("refund-approval", REFUND)
        await asked(engine, run.id)
        listed = (await client.get("/api/requests", params={"assignee": "lee"})).json()
        assert [r["message"] for r in listed] == ["Refund 120 USD to Ann?"]
        request_id = listed[0]["id"]
        assert (await client.get("/api/requests/nope")).json()["error"]["code"] == "request_not_found"
        bad = await client.post(f"/api/requests/{request_id}/respond", json={"responded_by": "lee"})
        assert (bad.status_code, bad.json()["error"]["code"]) == (422, "response_invalid")
        unknown = await client.post(f"/api/requests/{request_id}/respond", json={"approve": True})
        assert unknown.status_code == 422
        ok = await client.post(
            f"/api/requests/{request_id}/respond", json={"approved": True, "responded_by": "lee"}
        )
        assert ok.status_code == 200 and ok.json()["status"] == "approved"
        again = await client.post(
            f"/api/requests/{request_id}/respond", json={"approved": True, "responded_by": "lee"}
        )
        assert (again.status_code, again.json()["error"]["code"]) == (409, "request_already_answered")
        assert again.json()["error"]["details"]["responded_by"] == "lee"
        await ended(engine, run.id)
        assert (await client.get("/api/requests", params={"status": "approved"})).json()[0][
            "id"
        ] == request_id
        assert (await client.get("/api/approvals")).json() == [], "node requests are not agent approvals"


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"interaction": "input"}, "'form' goes with interaction 'input'"),
        ({"interaction": "selection"}, "'options' goes with interaction 'selection'"),
        ({"interaction": "input", "form": {"type": "array"}}, "type 'object' at the top"),
        ({"proposed": 1}, "'proposed' goes with interaction 'review'"),
        ({"timeout_action": "default_response"}, "needs it"),
        ({"wait": "0s"}, "between 1s and 365d"),
        ({"channels": ["carrier_pigeon"]}, "in_app"),
        ({"message": ""}, "at least 1 character"),
    ],
)
async def test_a_user_input_config_is_checked_at_publish(
    engine: Engine, extra: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        await engine.publish_workflow(flow("bad", ask(**extra), ("approved", "x"), ("rejected", "y")))
    assert words in str(info.value), info.value


async def test_an_agents_tool_approval_is_a_request_answered_the_same_way(engine: Engine) -> None:
    await engine.publish_workflow(agent_workflow(approvals=["create_task"]))
    model = replies(calls(("create_task", {"title": "needs a yes"})))
    async with running_worker(engine, model=model):
        run = await engine.start_run("meeting-follow-up", {})
        await until(engine, run.id, lambda r: r.status_reason == "awaiting_approval")
        (request,) = await engine.requests.list(run_id=run.id)
        assert (request["kind"], request["tool"], request["node_id"]) == ("approval", "create_task", None)
        with pytest.raises(ConfigError):
            await engine.requests.respond(request["id"], response="yes please")
        decided = await engine.requests.respond(request["id"], approved=True, responded_by="lee")
        assert decided["status"] == "approved" and decided["responded_by"] == "lee"
        await until(engine, run.id, lambda r: r.status.is_terminal)
    assert [t.title for t in await engine.tasks.list(run_id=run.id)] == ["needs a yes"]


async def test_retrying_a_run_whose_request_timed_out_asks_anew(engine: Engine) -> None:
    await engine.publish_workflow(
        flow("refund-retry", ask(wait="1s"), ("approved", "ok"), ("rejected", "no"))
    )
    async with running_worker(engine):
        run = await engine.start_run("refund-retry", REFUND)
        failed = await until(engine, run.id, lambda r: r.status.is_terminal, timeout=30)
        assert failed.error["code"] == "request_timed_out"
        await engine.retry_run(run.id)
        await until(engine, run.id, lambda r: r.status == "waiting" and r.status_reason == "awaiting_event")
        statuses = sorted(r["status"] for r in await engine.requests.list(run_id=run.id, status=None))
        assert statuses == ["expired", "pending"], "a new request, not the old timeout again"
        (fresh,) = await engine.requests.list(run_id=run.id, status="pending")
        await engine.requests.respond(fresh["id"], approved=True)
        done = await ended(engine, run.id)
    assert done.status == "completed" and done.output == "ok"
