"""The engine against a real small model: SmolLM2-135M-Instruct behind llama-cpp-python's
OpenAI-compatible server, reached through the OpenAI adapter like any hosted model.

A 135M model says odd things, so nothing here checks its wording. The tests check the engine's
invariants whatever it answers: a run always settles (completed, failed, suspended, canceled, or
waiting on something other than a retry) with a reason when it did not complete; it stays within
its budget; every answered model call is recorded with its tokens, and the run's totals are the
sum of its steps'; the API never answers with a 5xx.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import jsonschema
import pytest

from agentflow.api.app import create_app
from agentflow.core.records import RunRecord, StepRecord
from agentflow.core.replies import label_for
from agentflow.engine import Engine
from agentflow.integrations.smtp_sink import SmtpSink
from agentflow.runtime import reply_reader
from agentflow.runtime.metrics import REGISTRY
from tests.conftest import make_settings
from tests.integration.test_request_links import approval
from tests.integration.test_request_replies import RAW, mailed, reply
from tests.support.agents import TRANSCRIPT, agent_workflow, running_worker, until
from tests.support.http_server import WORKFLOWS, serve
from tests.support.real_model import RealModelServer

MODEL = "openai:smollm2"
AGENT_MAX_TOKENS = 96
"""Per decision: SmolLM2 rambles on (900+ tokens) when let, at some 40 tokens a second here."""
BUDGET = {"max_model_calls": 4, "max_tool_calls": 6}
ATTEMPTS = 2
QUICK_RETRY = {"max_attempts": ATTEMPTS, "initial_delay": "100ms", "max_delay": "200ms"}
RUN_TIMEOUT = 150.0
"""Seconds a run may take to settle: a few calls of a few seconds each, on a loaded 2-core box."""
SETTLED = {"completed", "failed", "canceled", "suspended"}
TRIAGE = {
    "type": "object",
    "properties": {
        "priority": {"type": "string", "enum": ["low", "high"]},
        "reason": {"type": "string"},
    },
    "required": ["priority"],
}
MEETING = {"title": "Acme weekly sync", "transcript": TRANSCRIPT}


def settled(status: str, reason: str | None) -> bool:
    """Done for now: terminal, suspended, or waiting on something other than a retry's backoff."""
    return status in SETTLED or (status == "waiting" and reason != "retry")


@asynccontextmanager
async def local_engine(database_url: str, server: RealModelServer, **more: Any) -> AsyncIterator[Engine]:
    settings = make_settings(
        database_url,
        openai_api_key="sk-local",
        openai_base_url=f"{server.url}/v1",
        http_allow="127.0.0.1",
        model_timeout=90.0,
        model_max_retries=1,
        **more,
    )
    engine = await Engine.connect(settings, migrate_schema=False)
    try:
        yield engine
    finally:
        await engine.close()


def agent_config(name: str = "meeting-follow-up") -> dict[str, Any]:
    return agent_workflow(name, model=MODEL, max_tokens=AGENT_MAX_TOKENS, budget=BUDGET, retry=QUICK_RETRY)


def describe(run: RunRecord, steps: Sequence[StepRecord], server: RealModelServer) -> str:
    """What happened, for assertion messages (and ``pytest -s``)."""
    lines = [f"run {run.status} reason={run.status_reason} error={run.error}"]
    for s in steps:
        said = s.output if s.status == "completed" else s.error
        lines.append(
            f"  {s.seq}.{s.attempt} {s.kind} {s.name} {s.status} tokens={s.input_tokens}/{s.output_tokens} {str(said)[:300]}"
        )
    return "\n".join(lines) + "\n--- llama server log tail ---\n" + server.log_tail(1500)


def check_run_totals(run: RunRecord, steps: Sequence[StepRecord], why: str) -> None:
    """The run's token totals are the sum of its steps'; a reason when it did not complete."""
    assert settled(run.status, run.status_reason), why
    if run.status != "completed":
        assert run.status_reason or (run.error or {}).get("code"), why
    assert run.input_tokens == sum(s.input_tokens for s in steps), why
    assert run.output_tokens == sum(s.output_tokens for s in steps), why
    answered = [s for s in steps if s.status == "completed" and s.input_tokens > 0]
    calls = sum(int(c["calls"]) for c in run.costs or [])
    assert calls >= len(answered), why
    if calls:
        assert run.costs is not None and all(c["key_type"] == MODEL for c in run.costs), why


def check_agent_run(run: RunRecord, steps: Sequence[StepRecord], why: str) -> None:
    check_run_totals(run, steps, why)
    decisions = [s for s in steps if s.kind == "agent.decide"]
    assert decisions, why
    answered = [s for s in decisions if s.status == "completed"]
    for step in answered:
        assert step.input_tokens > 0 and step.output_tokens > 0, why
        assert step.name == MODEL, why
    for step in decisions:
        if step.status == "failed":
            assert step.error is not None and step.error["code"].startswith("model_"), why
    tools = [s for s in steps if s.kind == "agent.tool" and s.status == "completed"]
    assert len(answered) <= BUDGET["max_model_calls"], why
    assert len(tools) <= BUDGET["max_tool_calls"], why
    # Every attempt is a step; one more for the budget's suspension.
    assert len(steps) <= (BUDGET["max_model_calls"] + BUDGET["max_tool_calls"]) * ATTEMPTS + 1, why
    assert len(answered) <= sum(int(c["calls"]) for c in run.costs or []) <= len(decisions), why
    if run.status == "suspended":
        assert (run.status_reason or "").startswith("budget"), why


async def test_an_agent_run_on_the_real_model_settles_within_its_budget_with_its_tokens(
    llama_server: RealModelServer, database_url: str
) -> None:
    async with local_engine(database_url, llama_server) as engine:
        await engine.publish_workflow(agent_config())
        async with running_worker(engine):
            run = await engine.start_run("meeting-follow-up", MEETING)
            done = await until(engine, run.id, lambda r: settled(r.status, r.status_reason), RUN_TIMEOUT)
        steps = await engine.list_steps(done.id)
    why = describe(done, steps, llama_server)
    print(why)
    check_agent_run(done, steps, why)


async def test_an_llm_node_on_the_real_model_completes_with_text_and_its_tokens(
    llama_server: RealModelServer, database_url: str
) -> None:
    async with local_engine(database_url, llama_server) as engine:
        await engine.publish_workflow(
            {
                "name": "greet",
                "kind": "structured",
                "retry": QUICK_RETRY,
                "nodes": [
                    {"id": "ask", "type": "llm", "model": MODEL, "max_tokens": 64,
                     "system": "You are a helpful assistant. Answer in one short sentence.",
                     "prompt": "Write a greeting for {{ payload.customer }}."},
                    {"id": "done", "type": "finish", "output": {"text": "{{ input.text }}"}},
                ],
            }
        )  # fmt: skip
        async with running_worker(engine):
            run = await engine.start_run("greet", {"customer": "Ann"})
            done = await until(engine, run.id, lambda r: r.status.is_terminal, RUN_TIMEOUT)
        steps = await engine.list_steps(done.id)
    why = describe(done, steps, llama_server)
    print(why)
    assert done.status == "completed", why
    step = next(s for s in steps if s.node_id == "ask" and s.status == "completed")
    assert step.kind == "llm" and step.name == MODEL, why
    assert step.input_tokens > 0 and step.output_tokens > 0, why
    assert isinstance(step.output["text"], str), why
    assert step.output_tokens <= 64 + 1, "max_tokens reached the server"
    assert isinstance(done.output["text"], str), why
    check_run_totals(done, steps, why)
    assert done.costs is not None and done.costs[0]["calls"] >= 1, why


async def test_an_llm_node_streams_the_real_models_text_as_it_writes_it(
    llama_server: RealModelServer, database_url: str
) -> None:
    async with local_engine(database_url, llama_server) as engine:
        await engine.publish_workflow(
            {
                "name": "greet-live",
                "kind": "structured",
                "retry": QUICK_RETRY,
                "nodes": [
                    {"id": "ask", "type": "llm", "model": MODEL, "max_tokens": 48, "stream": True,
                     "prompt": "Write a greeting for {{ payload.customer }}."},
                    {"id": "done", "type": "finish", "output": "{{ input.text }}"},
                ],
            }
        )  # fmt: skip
        async with running_worker(engine):
            run = await engine.start_run("greet-live", {"customer": "Ann"})
            done = await until(engine, run.id, lambda r: r.status.is_terminal, RUN_TIMEOUT)
        steps = await engine.list_steps(done.id)
        events = [e async for e in engine.streams.follow(done, seconds=0.0) if e is not None]
    why = describe(done, steps, llama_server)
    assert done.status == "completed", why
    step = next(s for s in steps if s.node_id == "ask" and s.status == "completed")
    texts = [e.data["text"] for e in events if e.kind == "delta" and e.data["step"] == step.seq]
    assert len(texts) > 1 or len(step.output["text"]) < 8, f"the text came in pieces: {texts}\n{why}"
    assert "".join(texts) == step.output["text"], why
    assert step.input_tokens > 0 and step.output_tokens > 0, f"a streamed call records its tokens\n{why}"
    check_run_totals(done, steps, why)


async def test_an_llm_node_with_an_output_schema_completes_with_valid_data_or_fails_with_a_reason(
    llama_server: RealModelServer, database_url: str
) -> None:
    """The answer must match the schema, or the run fails with ``output_invalid`` (the model
    answered, and is paid for) or a ``model_*`` code (the server refused the request).
    llama-cpp-python's server answers 500 to OpenAI's ``response_format`` ``json_schema`` (it
    knows only ``json_object`` with a ``schema``): the OpenAI adapter then asks it in JSON mode,
    so the model does answer here."""
    async with local_engine(database_url, llama_server) as engine:
        await engine.publish_workflow(
            {
                "name": "triage",
                "kind": "structured",
                "retry": QUICK_RETRY,
                "nodes": [
                    {"id": "triage", "type": "llm", "model": MODEL, "max_tokens": 64, "output_retries": 1,
                     "system": "You triage support tickets. Answer with JSON only.",
                     "prompt": "Ticket: {{ payload.text }}", "output_schema": TRIAGE},
                ],
            }
        )  # fmt: skip
        async with running_worker(engine):
            run = await engine.start_run("triage", {"text": "Our invoices are wrong again."})
            done = await until(engine, run.id, lambda r: r.status.is_terminal, RUN_TIMEOUT)
        steps = await engine.list_steps(done.id)
    why = describe(done, steps, llama_server)
    print(why)
    check_run_totals(done, steps, why)
    calls = sum(int(c["calls"]) for c in done.costs or [])
    if done.status == "completed":
        step = next(s for s in steps if s.node_id == "triage" and s.status == "completed")
        jsonschema.validate(step.output["data"], TRIAGE)
        assert calls >= 1 and done.input_tokens > 0, why
    else:
        assert done.status == "failed", why
        code = done.error["code"]
        assert code == "output_invalid" or code.startswith("model_"), why
        if code == "output_invalid":
            assert calls >= 1 and done.input_tokens > 0, "the model answered: its calls were paid for"
        else:
            assert done.error["details"].get("provider") == "openai", why


def internal_errors() -> float:
    return REGISTRY.get_sample_value("agentflow_http_internal_errors_total") or 0.0


async def test_an_agent_run_on_the_real_model_through_the_api_never_answers_5xx(
    llama_server: RealModelServer, database_url: str
) -> None:
    before = internal_errors()
    statuses: list[int] = []

    def seen(response: httpx.Response) -> httpx.Response:
        statuses.append(response.status_code)
        assert response.status_code < 500, (
            f"{response.request.method} {response.request.url}: {response.text}"
        )
        return response

    async with (
        local_engine(database_url, llama_server) as engine,
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base, timeout=60, trust_env=False) as client,
        running_worker(engine),
    ):
        config = agent_config("api-follow-up")
        published = seen(await client.post(WORKFLOWS, json=config))
        assert published.status_code in (200, 201), published.text
        started = seen(await client.post(f"{WORKFLOWS}/api-follow-up/runs", json={"payload": MEETING}))
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]
        url = f"{WORKFLOWS}/api-follow-up/runs/{run_id}"
        loop = asyncio.get_running_loop()
        stop_at = loop.time() + RUN_TIMEOUT
        body = seen(await client.get(url)).json()
        while not settled(body["status"], body["status_reason"]):
            assert loop.time() < stop_at, f"run stuck: {body['status']} {body['status_reason']}"
            await asyncio.sleep(0.25)
            body = seen(await client.get(url)).json()
        seen(await client.get(f"{WORKFLOWS}/api-follow-up/runs"))
        seen(await client.get(f"{WORKFLOWS}/api-follow-up"))
        run = await engine.get_run(UUID(run_id))
        steps = await engine.list_steps(run.id)
    why = describe(run, steps, llama_server)
    print(why)
    assert {s["kind"] for s in body["steps"]} <= {s.kind for s in steps}, why
    check_agent_run(run, steps, why)
    assert all(code < 500 for code in statuses)
    assert internal_errors() == before, "a request ended in a 500 internal_error"


async def test_a_reply_the_real_model_reads_is_labelled_by_its_score_or_held_and_never_lost(
    llama_server: RealModelServer, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A free-text reply to a request's email, read by SmolLM2: whatever it makes of it, the
    reply ends read, with a label that its score gives, or held with the reason it could not be
    read (the server's structured output refused, three attempts); the request is answered
    only by a relevant reading, and then exactly as the reading says."""
    monkeypatch.setattr(reply_reader, "RETRY_BASE", 0.1)
    flow = approval("reply-real", assignees=["lee@example.com"], channels=["email"], model=MODEL)
    with SmtpSink(jsonl_path=tmp_path / "mail.jsonl") as sink:
        async with (
            local_engine(
                database_url, llama_server, smtp_url=sink.url, smtp_from="agentflow@example.com",
                reply_to="replies@in.example.com",
            ) as engine,
            serve(create_app(engine)) as base,
            httpx.AsyncClient(base_url=base, timeout=60, trust_env=False) as api,
            running_worker(engine),
        ):  # fmt: skip
            await engine.publish_workflow(flow)
            run = await engine.start_run("reply-real", {"amount": 120})
            mail = await mailed(engine, sink, run.id)
            posted = await api.post(
                "/api/public/inbound/email",
                content=reply(mail, "Yes, go ahead with the refund."),
                headers=RAW,
            )
            assert posted.status_code == 202, posted.text
            loop = asyncio.get_running_loop()
            stop_at = loop.time() + RUN_TIMEOUT
            while (read := (await engine.replies.list(request_id=UUID(posted.json()["request_id"])))[0])[
                "outcome"
            ] is None:
                assert loop.time() < stop_at, f"reply never read: {read}"
                await asyncio.sleep(0.25)
            request = await engine.requests.get(UUID(posted.json()["request_id"]))
    why = f"{read}\n{request}\n--- llama server log tail ---\n{llama_server.log_tail(1500)}"
    print(why)
    verdict = read["verdict"]
    if "error" in verdict:
        assert (read["label"], read["outcome"], read["attempts"]) == ("uncertain", "held", 3), why
        assert request["status"] == "pending", why
        return
    assert 0 <= read["score"] <= 1 and read["label"] == label_for(read["score"]), why
    assert verdict["model"] == "openai:smollm2" and verdict["input_tokens"] > 0, why
    if read["outcome"] == "answered":
        assert read["label"] == "relevant", why
        assert request["status"] == ("approved" if verdict["approved"] else "rejected"), why
        assert (request["responded_by"], request["responded_via"]) == ("lee@example.com", "email"), why
    else:
        assert read["outcome"] in ("held", "ignored") and request["status"] == "pending", why
