"""A run's resumable event stream (issue 12): status, each checkpointed step, and a model's text
while it is written, from ``GET /api/runs/{id}/stream``; and the OpenAI adapter streaming
through the real SDK against a local server speaking the protocol."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.core.chat import Message, ModelRequest, ToolSchema
from agentflow.engine import Engine
from agentflow.llm.openai import OpenAIProvider
from agentflow.llm.scripted import ScriptedProvider
from agentflow.runtime.scheduler import Scheduler
from agentflow.store.run_deltas import DeltaWriter
from tests.support.agents import calls, running_worker, until
from tests.support.vendor_servers import Reply, openai_chunks, vendor_server

ANSWER = "Dear Ann, your export is ready and waiting in your inbox."


def summarizer(stream: bool = True) -> dict[str, Any]:
    return {
        "name": "summarize",
        "kind": "structured",
        "nodes": [
            {"id": "draft", "type": "llm", "prompt": "Write to {{ payload.customer }}.", "stream": stream},
            {"id": "done", "type": "finish", "output": "{{ input.text }}"},
        ],
    }


def parse(body: str) -> list[dict[str, Any]]:
    """The events of an SSE body: ``{"id", "event", "data"}`` each (comments and retry skipped)."""
    events = []
    for block in body.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":")
        )
        if "event" in fields:
            events.append(
                {"id": fields.get("id"), "event": fields["event"], "data": json.loads(fields["data"])}
            )
    return events


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


async def test_an_llm_nodes_text_streams_then_its_step_and_the_end(
    engine: Engine, api: httpx.AsyncClient
) -> None:
    model = ScriptedProvider(lambda request: Message("assistant", ANSWER))
    await engine.publish_workflow(summarizer())
    async with running_worker(engine, model=model):
        run = await engine.start_run("summarize", {"customer": "Ann"})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    events = parse((await api.get(f"/api/runs/{run.id}/stream")).text)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "status" and kinds[-1] == "end"
    deltas = [e["data"] for e in events if e["event"] == "delta"]
    assert len(deltas) > 3, "the text came in pieces"
    assert "".join(d["text"] for d in deltas) == ANSWER
    (draft,) = [e["data"] for e in events if e["event"] == "step" and e["data"]["node_id"] == "draft"]
    assert draft["output"]["text"] == ANSWER and {d["step"] for d in deltas} == {draft["seq"]}
    moving = [e["id"] for e in events if e["event"] in ("step", "delta")]
    assert len(set(moving)) == len(moving), "every step and delta moves the cursor"


async def test_a_reader_resumes_after_the_last_id_without_gaps_or_repeats(
    engine: Engine, api: httpx.AsyncClient
) -> None:
    model = ScriptedProvider(lambda request: Message("assistant", ANSWER))
    await engine.publish_workflow(summarizer())
    async with running_worker(engine, model=model):
        run = await engine.start_run("summarize", {"customer": "Ann"})
        await until(engine, run.id, lambda r: r.status.is_terminal)
    whole = [e for e in parse((await api.get(f"/api/runs/{run.id}/stream")).text) if e["event"] != "status"]
    cut = len(whole) // 2
    rest = parse(
        (await api.get(f"/api/runs/{run.id}/stream", headers={"Last-Event-ID": whole[cut]["id"]})).text
    )
    assert [e for e in rest if e["event"] != "status"] == whole[cut + 1 :]
    again = parse((await api.get(f"/api/runs/{run.id}/stream", params={"after": whole[cut]["id"]})).text)
    assert [e for e in again if e["event"] != "status"] == whole[cut + 1 :]


async def test_an_agents_decisions_stream_and_plain_steps_do_not(
    engine: Engine, api: httpx.AsyncClient
) -> None:
    said = "Let me create the task for Ann now."
    model = ScriptedProvider(
        lambda request: Message("assistant", said, calls(("complete", {"summary": "done"})).tool_calls)
    )
    flow = {
        "name": "streaming-agent",
        "kind": "structured",
        "nodes": [
            {"id": "helper", "type": "agent", "prompt": "Help Ann.", "stream": True},
            {"id": "quiet", "type": "llm", "prompt": "Say hi."},
            {"id": "done", "type": "finish", "output": "{{ input.text }}"},
        ],
    }
    await engine.publish_workflow(flow)
    async with running_worker(engine, model=model):
        run = await engine.start_run("streaming-agent", {})
        await until(engine, run.id, lambda r: r.status.is_terminal)
    child = await engine.db.pool.fetchval("SELECT id FROM runs WHERE parent_run_id = $1", run.id)
    agent = parse((await api.get(f"/api/runs/{child}/stream")).text)
    assert "".join(e["data"]["text"] for e in agent if e["event"] == "delta") == said
    parent = parse((await api.get(f"/api/runs/{run.id}/stream")).text)
    assert not [e for e in parent if e["event"] == "delta"], "a node without stream: true streams nothing"
    assert [e["data"]["node_id"] for e in parent if e["event"] == "step"] == [
        "helper",
        "helper",
        "quiet",
        "done",
    ]


async def test_bad_cursors_and_foreign_runs_get_clear_errors(engine: Engine, api: httpx.AsyncClient) -> None:
    await engine.publish_workflow(summarizer(stream=False))
    run = await engine.start_run("summarize", {"customer": "Ann"})
    bad = await api.get(f"/api/runs/{run.id}/stream", headers={"Last-Event-ID": "12; DROP TABLE"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "stream_cursor_invalid"
    missing = await api.get("/api/runs/00000000-0000-0000-0000-000000000001/stream")
    assert missing.status_code == 404


async def test_a_restarted_call_tells_readers_to_drop_its_text_and_old_text_is_pruned(engine: Engine) -> None:
    await engine.publish_workflow(summarizer())
    run = await engine.start_run("summarize", {"customer": "Ann"})
    sink = DeltaWriter(engine.db.pool, run.workspace_id, run.id, 0, 1)
    sink.restart()  # nothing streamed yet: no restart to tell
    sink.text("Dear")
    sink.restart()
    sink.text("Hello")
    await sink.close()
    events = [
        e async for e in engine.streams.follow(run, seconds=0.0) if e is not None and e.kind != "status"
    ]
    assert [(e.kind, e.data.get("text")) for e in events] == [
        ("delta", "Dear"),
        ("restart", None),
        ("delta", "Hello"),
    ]
    await engine.db.pool.execute("UPDATE run_deltas SET created_at = now() - interval '2 days'")
    assert await Scheduler(engine.db).expire_deltas() == 3


async def test_the_openai_adapter_streams_text_and_joins_tool_call_pieces() -> None:
    async with vendor_server() as server:
        server.queue(
            Reply(
                events=openai_chunks(
                    ["Checking ", "the weather", "."],
                    [("call_1", "get_weather", ['{"ci', 'ty": "Par', 'is"}'])],
                    prompt_tokens=21,
                    completion_tokens=9,
                )
            )
        )
        provider = OpenAIProvider(api_key="sk-test", base_url=f"{server.url}/v1", timeout=5.0)
        sink = Collected()
        weather = ToolSchema(
            "get_weather", "Weather", {"type": "object", "properties": {"city": {"type": "string"}}}
        )
        request = ModelRequest("gpt-4o-mini", (Message("user", "Weather in Paris?"),), (weather,))
        response = await provider.stream(request, sink)
        await provider.aclose()
        sent = server.requests[0].body
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sink.pieces == ["Checking ", "the weather", "."] and sink.restarts == 1
    assert response.message.content == "Checking the weather."
    (call,) = response.message.tool_calls
    assert (call.id, call.name, call.arguments) == ("call_1", "get_weather", {"city": "Paris"})
    assert (response.usage.input_tokens, response.usage.output_tokens) == (21, 9)
    assert response.finish_reason == "tool_calls"


class Collected:
    """A sink that keeps what it is fed."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.restarts = 0

    def restart(self) -> None:
        self.restarts += 1

    def text(self, chunk: str) -> None:
        self.pieces.append(chunk)


async def test_a_stream_without_usage_is_counted_by_estimate_not_as_free() -> None:
    async with vendor_server() as server:
        server.queue(Reply(events=openai_chunks(["Hello ", "Ann."], usage=False)))
        provider = OpenAIProvider(api_key="sk-test", base_url=f"{server.url}/v1", timeout=5.0)
        request = ModelRequest("local", (Message("user", "Greet Ann, please, in a few words."),))
        response = await provider.stream(request, Collected())
        await provider.aclose()
    assert response.message.content == "Hello Ann."
    assert (response.usage.input_tokens, response.usage.output_tokens) == (9, 3), "characters / 4, rounded up"
