"""wait_callback end to end: the run waits durably for an outside system to POST to its
single-use callback URL (told to it by a webhook, exactly once), the body flows on, a second
call gets 409, a wrong token 404, and the timeout follows the declared action."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.core.errors import ConfigError
from agentflow.engine import Engine
from tests.conftest import make_settings
from tests.support.agents import running_worker, until
from tests.support.http_server import serve
from tests.support.recording_server import RecordingServer


@pytest.fixture
def outside() -> Iterator[RecordingServer]:
    with RecordingServer() as server:
        yield server


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[Engine]:
    """An engine whose notifier may post to this machine (the outside system's server)."""
    eng = await Engine.connect(make_settings(database_url, http_allow="127.0.0.1"), migrate_schema=False)
    yield eng
    await eng.close()


def flow(name: str, **node: Any) -> dict[str, Any]:
    wait = {"id": "hold", "type": "wait_callback", **node}
    nodes = [wait, {"id": "done", "type": "finish", "output": {"got": "{{ input }}"}}]
    edges = [{"from": "hold", "to": "done"}]
    if node.get("timeout_action") == "continue":
        nodes.append({"id": "late", "type": "finish", "output": "nobody called"})
        edges.append({"from": "hold", "port": "timeout", "to": "late"})
    return {"name": name, "kind": "structured", "nodes": nodes, "edges": edges}


async def callback_path(engine: Engine, run_id: Any) -> str:
    """The path and query of the run's callback URL, once it waits."""
    await until(engine, run_id, lambda r: r.status == "waiting" and r.status_reason == "awaiting_event")
    step = next(s for s in await engine.list_steps(run_id) if s.node_id == "hold")
    url = urlsplit(step.output["callback_url"])
    assert url.path.startswith("/api/public/callbacks/") and "token=" in url.query
    return f"{url.path}?{url.query}"


async def test_the_url_is_told_once_and_the_first_call_resumes_the_run_with_its_body(
    engine: Engine, outside: RecordingServer
) -> None:
    await engine.publish_workflow(
        flow("ship", notify=outside.url + "/carrier", data={"order": "{{ payload.order }}"})
    )
    async with (
        running_worker(engine),
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as api,
    ):
        run = await engine.start_run("ship", {"order": "A-17"})
        path = await callback_path(engine, run.id)
        assert await asyncio.to_thread(outside.wait_for, lambda s: len(s.calls("/carrier")) >= 1, 15)
        (told,) = outside.calls("/carrier")
        assert told.body["kind"] == "callback" and told.key == told.body["id"]
        assert told.body["data"]["callback_url"].endswith(path)
        assert told.body["data"]["data"] == {"order": "A-17"} and told.body["data"]["run_id"] == str(run.id)
        first = await api.post(path, json={"tracking": "ZX9", "eta_days": 2})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
        second = await api.post(path, json={"tracking": "again"})
    assert first.status_code == 200, first.text
    assert first.json() == {
        "request_id": first.json()["request_id"],
        "run_id": str(run.id),
        "status": "answered",
    }
    assert done.status == "completed" and done.output == {"got": {"tracking": "ZX9", "eta_days": 2}}
    assert second.status_code == 409 and second.json()["error"]["code"] == "request_already_answered"
    request = await engine.requests.get(first.json()["request_id"])
    assert (request["kind"], request["responded_via"], request["responded_by"]) == (
        "callback",
        "callback",
        "callback",
    )
    assert "token" not in str(request["spec"]).lower().replace("token_sha256", ""), (
        "only the token's hash is kept"
    )
    assert len(outside.calls("/carrier")) == 1


async def test_a_wrong_token_or_id_is_404_and_changes_nothing(engine: Engine) -> None:
    await engine.publish_workflow(flow("guarded"))
    async with (
        running_worker(engine),
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as api,
    ):
        run = await engine.start_run("guarded", {})
        path = await callback_path(engine, run.id)
        request_path = path.split("?")[0]
        wrong = await api.post(request_path + "?token=guessed", json={"x": 1})
        missing = await api.post(request_path, json={"x": 1})
        unknown = await api.post("/api/public/callbacks/not-a-uuid?token=x", json={})
        by_header = await api.post(
            request_path, json=None, headers={"X-Agentflow-Callback-Token": path.split("token=")[1]}
        )
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    for answer in (wrong, missing, unknown):
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "callback_not_found", (
            answer.text
        )
    assert by_header.status_code == 200 and done.output == {"got": None}


async def test_two_concurrent_calls_one_wins_the_other_gets_409(engine: Engine) -> None:
    await engine.publish_workflow(flow("race"))
    async with (
        running_worker(engine),
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as api,
    ):
        run = await engine.start_run("race", {})
        path = await callback_path(engine, run.id)
        answers = await asyncio.gather(*(api.post(path, json={"caller": n}) for n in range(8)))
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    codes = sorted(a.status_code for a in answers)
    assert codes == [200] + [409] * 7, codes
    winner = next(a for a in answers if a.status_code == 200)
    assert done.output["got"]["caller"] in range(8)
    assert winner.json()["run_id"] == str(run.id)
    steps = [s for s in await engine.list_steps(run.id) if s.node_id == "hold" and s.status == "completed"]
    assert len(steps) == 2, "one step made the callback, one took the call"


@pytest.mark.parametrize(
    ("extra", "status", "output"),
    [
        ({"timeout_action": "fail"}, "failed", None),
        ({"timeout_action": "continue"}, "completed", "nobody called"),
        ({"timeout_action": "default_response", "default_response": {"tracking": None}}, "completed",
         {"got": {"tracking": None}}),
    ],
)  # fmt: skip
async def test_the_timeout_follows_the_declared_action(
    engine: Engine, extra: dict[str, Any], status: str, output: Any
) -> None:
    await engine.publish_workflow(flow("late", wait="1s", **extra))
    async with (
        running_worker(engine),
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as api,
    ):
        run = await engine.start_run("late", {})
        path = await callback_path(engine, run.id)
        done = await until(engine, run.id, lambda r: r.status.is_terminal, timeout=30)
        after = await api.post(path, json={"too": "late"})
    assert done.status == status and done.output == output
    if status == "failed":
        assert done.error is not None and done.error["code"] == "callback_timed_out"
    assert after.status_code == 409 and after.json()["error"]["code"] == "request_already_answered"


@pytest.mark.parametrize(
    ("node", "words"),
    [
        ({"wait": "0s"}, "between 1s and 365d"),
        ({"timeout_action": "default_response"}, "needs it"),
        ({"data": {"a": 1}}, "'notify', which is missing"),
        ({"notify": "ftp://example.com/x"}, "http or https"),
    ],
)
async def test_a_wait_callback_config_is_checked_at_publish(
    engine: Engine, node: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        await engine.publish_workflow(flow("bad", **node))
    assert words in str(info.value.info.details["errors"]), info.value.info.details
