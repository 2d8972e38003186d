"""Run variables end to end: ``state`` on start (engine, HTTP), ``save_to_state``, ``{{ state.x }}``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.api.app import create_app
from agentflow.core.errors import ConfigError
from agentflow.engine import Engine
from agentflow.runtime.dispatcher import Dispatcher
from agentflow.runtime.scheduler import Scheduler
from agentflow.runtime.worker import Worker
from tests.support.http_server import WORKFLOWS, error_code, poll_run, publish, serve

DEFINITION = {
    "total": {"type": "number", "description": "running total", "default": 0},
    "label": {"type": "string", "default": "none"},
    "big": "boolean",
    "seen": {"type": "array", "default": []},
}

# Node "a" adds, saves; a wait hands the run back to the database; "b" reads the saved values.
COUNTER = {
    "name": "counter",
    "kind": "structured",
    "state_definition": DEFINITION,
    "nodes": [
        {
            "id": "a",
            "type": "tool",
            "tool": "add",
            "args": {"a": "{{ payload.x }}", "b": "{{ state.total }}"},
            "save_to_state": {"total": "{{ output }}", "big": "{{ output > 10 }}", "seen": "{{ [output] }}"},
        },
        {"id": "nap", "type": "wait", "duration": "0.2s"},
        {
            "id": "b",
            "type": "tool",
            "tool": "echo",
            "args": {"value": "{{ state.label }}:{{ state.total * 10 }}:{{ state.big }}"},
        },
        {
            "id": "done",
            "type": "finish",
            "output": {"total": "{{ state.total }}", "seen": "{{ state.seen }}"},
        },
    ],
}
MISMATCH = {
    "name": "mismatch",
    "kind": "structured",
    "state_definition": {"total": "number"},
    "nodes": [
        {
            "id": "a",
            "type": "tool",
            "tool": "echo",
            "args": {"value": "abc"},
            "save_to_state": {"total": "{{ output.value }}"},
        },
        {"id": "never", "type": "tool", "tool": "echo"},
    ],
}
PLAIN = {"name": "plain", "kind": "structured", "nodes": [{"id": "w", "type": "wait", "duration": "1h"}]}


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base, timeout=60) as c:
        yield c


async def test_a_saved_variable_is_read_by_a_later_node_after_a_wait(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(COUNTER)
    run = await engine.start_run("counter", {"x": 4}, state={"total": 10, "label": "L"})
    assert run.state == {"node": "a", "vars": {"total": 10, "label": "L", "big": None, "seen": []}}
    done = await engine.wait_for_run(run.id, timeout=10)
    assert done.status == "completed", done.error
    assert done.output == {"total": 14, "seen": [14]}
    steps = {s.node_id: s for s in await engine.list_steps(run.id)}
    assert steps["a"].input == {"a": 4, "b": 10}, "{{ state.total }} read the starting state"
    assert steps["b"].output == {"value": "L:140:True"}, "the saved values survived the wait's checkpoint"
    assert done.state == {"node": None, "vars": {"total": 14, "label": "L", "big": True, "seen": [14]}}
    assert len(steps) == 4 and all(s.attempt == 1 for s in steps.values()), "one checkpoint per step"


async def test_defaults_fill_what_the_start_leaves_out(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(COUNTER)
    done = await engine.wait_for_run((await engine.start_run("counter", {"x": 1})).id, timeout=10)
    assert done.status == "completed", done.error
    assert done.state["vars"] == {"total": 1, "label": "none", "big": False, "seen": [1]}


async def test_a_save_of_the_wrong_type_fails_the_run_at_once(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(MISMATCH)
    done = await engine.wait_for_run((await engine.start_run("mismatch")).id, timeout=10)
    assert done.status == "failed" and done.status_reason == "state_invalid"
    assert (
        done.error is not None
        and "cannot save to state.total: must be a number, not a string" in done.error["message"]
    )
    steps = await engine.list_steps(done.id)
    assert [(s.node_id, s.status, s.attempt) for s in steps] == [("a", "failed", 1)], "not retried"
    assert done.state == {"node": "a", "vars": {"total": None}}, "nothing was saved"


async def test_a_bad_starting_state_is_refused_with_each_field(engine: Engine) -> None:
    await engine.publish_workflow(COUNTER)
    await engine.publish_workflow(PLAIN)
    with pytest.raises(ConfigError) as info:
        await engine.start_run("counter", {"x": 1}, state={"total": "ten", "big": 1, "nope": True})
    assert info.value.code == "state_invalid"
    assert {e["path"]: e["message"] for e in info.value.info.details["errors"]} == {
        "state.total": "must be a number, not a string",
        "state.big": "must be true or false, not a number",
        "state.nope": "not declared in state_definition (declared: big, label, seen, total)",
    }
    with pytest.raises(ConfigError) as info:
        await engine.start_run("plain", state={"x": 1})
    assert info.value.code == "state_invalid" and "no state_definition" in info.value.info.message
    assert await engine.list_runs() == [], "no run was created"
    plain = await engine.start_run("plain", state={})
    assert plain.state == {"node": "w"}, "an empty state is fine without a definition"


async def test_runs_started_by_events_and_schedules_get_the_defaults(engine: Engine) -> None:
    nap = [{"id": "nap", "type": "wait", "duration": "1h"}]
    await engine.publish_workflow(
        {
            "name": "on-event",
            "kind": "structured",
            "trigger": {"topics": ["t.*"]},
            "state_definition": DEFINITION,
            "nodes": nap,
        }
    )
    await engine.events.publish([{"topic": "t.x", "message_id": "e1", "data": {"x": 1}}])
    consumer = Dispatcher(engine.db).consumer()
    while await consumer.consume_batch() > 0:
        pass
    [run] = await engine.list_runs(workflow="on-event")
    assert run.state == {"node": "nap", "vars": {"total": 0, "label": "none", "big": None, "seen": []}}

    await engine.publish_workflow(
        {
            "name": "on-cron",
            "kind": "structured",
            "schedule": {"cron": "* * * * *"},
            "state_definition": DEFINITION,
            "nodes": nap,
        }
    )
    scheduler = Scheduler(engine.db)
    await scheduler.tick()
    await engine.db.pool.execute(  # as if a fire time had passed
        "UPDATE schedules SET last_fire = now() - interval '61 seconds', next_fire_at = now() - interval '1 second'"
    )
    assert await scheduler.tick() == 1
    [run] = await engine.list_runs(workflow="on-cron")
    assert run.state["vars"] == {"total": 0, "label": "none", "big": None, "seen": []}


async def test_http_start_with_state_then_the_detail_shows_the_saved_variables(
    client: httpx.AsyncClient, worker: Worker
) -> None:
    await publish(client, COUNTER)
    response = await client.post(
        f"{WORKFLOWS}/counter/runs", json={"payload": {"x": 2}, "state": {"label": "web"}}
    )
    assert response.status_code == 201, response.text
    run = response.json()
    assert run["state"]["vars"] == {"total": 0, "label": "web", "big": None, "seen": []}
    detail = await poll_run(client, "counter", run["id"], {"completed", "failed"})
    assert detail["status"] == "completed", detail["error"]
    assert detail["state"] == {"node": None, "vars": {"total": 2, "label": "web", "big": False, "seen": [2]}}
    assert [s["output"] for s in detail["steps"] if s["node_id"] == "b"] == [{"value": "web:20:False"}]


async def test_http_refuses_bad_state_with_422_state_invalid(client: httpx.AsyncClient) -> None:
    await publish(client, COUNTER)
    await publish(client, PLAIN)
    response = await client.post(
        f"{WORKFLOWS}/counter/runs",
        json={"payload": {"x": 1}, "state": {"total": "1", "seen": {}, "extra": 1}},
    )
    assert error_code(response, 422) == "state_invalid"
    body = response.json()["error"]
    assert [e["path"] for e in body["details"]["errors"]] == ["state.total", "state.seen", "state.extra"]
    assert "state.total" in body["message"] and body["solution"]
    response = await client.post(f"{WORKFLOWS}/plain/runs", json={"state": {"x": 1}})
    assert error_code(response, 422) == "state_invalid"
    response = await client.post(f"{WORKFLOWS}/counter/runs", json={"state": [1, 2]})
    assert error_code(response, 422) == "invalid_request"
    assert response.json()["error"]["details"]["errors"][0]["path"] == "body.state"
    response = await client.post(f"{WORKFLOWS}/counter/runs", json={"state": {"label": "x" * 70_000}})
    assert error_code(response, 422) == "state_invalid"
    listed = (await client.get(f"{WORKFLOWS}/counter/runs")).json()["runs"]
    assert listed == [], "no run was created"


async def test_http_publish_refuses_undeclared_saves_and_bad_defaults(client: httpx.AsyncClient) -> None:
    bad = {
        **PLAIN,
        "state_definition": {"n": {"type": "number", "default": "zero"}},
        "nodes": [{"id": "w", "type": "finish", "save_to_state": {"m": "1"}}],
    }
    response = await client.post(WORKFLOWS, json=bad)
    assert error_code(response, 422) == "config_invalid"
    paths = {e["path"]: e["message"] for e in response.json()["error"]["details"]["errors"]}
    assert paths == {"state_definition.n": "the default must be a number, not a string"}
    bad["state_definition"] = {"n": "number"}
    response = await client.post(WORKFLOWS, json=bad)
    assert error_code(response, 422) == "config_invalid"
    paths = {e["path"]: e["message"] for e in response.json()["error"]["details"]["errors"]}
    assert paths == {"nodes[0].save_to_state.m": "'m' is not declared in state_definition"}
