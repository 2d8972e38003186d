"""Moving parked runs to another version (issue 15, ``runs migrate``): a run waiting for a
person moves to the fixed version and finishes there; one whose node is gone, or whose
variables do not fit, stays with the reasons; a run a worker took meanwhile is not changed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.engine import Engine
from agentflow.store import run_moves
from tests.support.agents import running_worker, until
from tests.support.cli import cli_env, run_cli


def approval(
    output: str, *, ask_id: str = "approve", variables: dict[str, Any] | None = None
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": "refund",
        "kind": "structured",
        "nodes": [
            {"id": ask_id, "type": "user_input", "message": "Refund?"},
            {"id": "done", "type": "finish", "output": output},
            {"id": "no", "type": "finish", "output": "declined"},
        ],
        "edges": [
            {"from": ask_id, "port": "approved", "to": "done"},
            {"from": ask_id, "port": "rejected", "to": "no"},
        ],
    }
    if variables is not None:
        config["state_definition"] = variables
    return config


async def parked_runs(engine: Engine, n: int) -> list[UUID]:
    ids = []
    async with running_worker(engine):
        for _ in range(n):
            run = await engine.start_run("refund", {})
            await until(engine, run.id, lambda r: r.status == "waiting")
            ids.append(run.id)
    return ids


async def versions(engine: Engine, ids: list[UUID]) -> list[int]:
    return [(await engine.get_run(i)).workflow_version for i in ids]


async def test_a_run_waiting_for_a_person_moves_to_the_fix_and_finishes_there(engine: Engine) -> None:
    await engine.publish_workflow(approval("refunded (broken)"))
    ids = await parked_runs(engine, 2)
    await engine.publish_workflow(approval("refunded"))
    workflow = await engine.get_workflow("refund")
    dry = await engine.run_moves.migrate(workflow, dry_run=True)
    assert sorted(dry.moved) == sorted((i, 1) for i in ids) and dry.refused == []
    assert await versions(engine, ids) == [1, 1]  # a dry run moves nothing
    done = await engine.run_moves.migrate(workflow)
    assert done.to_version == 2 and sorted(done.moved) == sorted((i, 1) for i in ids)
    assert await versions(engine, ids) == [2, 2]
    assert (await engine.run_moves.migrate(workflow)).moved == []  # already there
    [request] = await engine.requests.list(run_id=ids[0])
    async with running_worker(engine):
        await engine.requests.respond(request["id"], approved=True, responded_by="lee")
        finished = await engine.wait_for_run(ids[0], timeout=30)
    assert finished.output == "refunded"


async def test_a_run_stays_where_its_node_is_gone_or_its_variables_do_not_fit(engine: Engine) -> None:
    await engine.publish_workflow(approval("ok", variables={"count": {"type": "number", "default": 1}}))
    [run_id] = await parked_runs(engine, 1)
    await engine.publish_workflow(approval("ok", ask_id="sign", variables={"count": {"type": "number"}}))
    await engine.publish_workflow(approval("ok", variables={"count": {"type": "string"}}))
    await engine.publish_workflow(approval("ok", variables={}))
    workflow = await engine.get_workflow("refund")
    gone = await engine.run_moves.migrate(workflow, to_version=2)
    assert gone.moved == [] and gone.refused[0].problems == [
        "node 'approve', which it waits in, is not in this version"
    ]
    retyped = await engine.run_moves.migrate(workflow, to_version=3)
    assert "'count' must be a string" in retyped.refused[0].problems[0]
    undeclared = await engine.run_moves.migrate(workflow, to_version=4)
    assert "'count' is not declared" in undeclared.refused[0].problems[0]
    assert await versions(engine, [run_id]) == [1]
    await engine.publish_workflow(
        approval(
            "ok", variables={"count": {"type": "number"}, "note": {"type": "string", "default": "moved"}}
        )
    )
    moved = await engine.run_moves.migrate(workflow, to_version=5, from_version=1, run_ids=[run_id])
    assert moved.moved == [(run_id, 1)]
    assert (await engine.get_run(run_id)).state["vars"] == {"count": 1, "note": "moved"}


async def test_a_run_a_worker_took_meanwhile_is_not_changed(engine: Engine) -> None:
    await engine.publish_workflow(approval("v1"))
    [run_id] = await parked_runs(engine, 1)
    [read] = await run_moves.parked(
        engine.db.pool, read_workspace(engine), (await engine.get_workflow("refund")).id,
        from_version=None, run_ids=None, limit=10,
    )  # fmt: skip
    await engine.db.pool.execute("UPDATE runs SET fencing_token = fencing_token + 1 WHERE id = $1", run_id)
    await engine.publish_workflow(approval("v2"))
    assert not await run_moves.move(engine.db.pool, read, 2, read.state)
    assert await versions(engine, [run_id]) == [1]


def read_workspace(engine: Engine) -> UUID:
    from agentflow.core.ids import DEFAULT_WORKSPACE

    return DEFAULT_WORKSPACE


async def test_an_agent_run_not_yet_started_moves_to_any_version(engine: Engine) -> None:
    agent = {"name": "desk", "kind": "agent", "prompt": "Answer.", "model": "scripted:x"}
    await engine.publish_workflow(agent)
    run = await engine.start_run("desk", {})  # no worker: it stays created
    await engine.publish_workflow({**agent, "prompt": "Answer kindly."})
    done = await engine.run_moves.migrate(await engine.get_workflow("desk"))
    assert done.moved == [(run.id, 1)] and (await engine.get_run(run.id)).workflow_version == 2


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


async def test_the_api_and_the_cli_migrate(engine: Engine, api: httpx.AsyncClient, database_url: str) -> None:
    await engine.publish_workflow(approval("v1"))
    ids = await parked_runs(engine, 2)
    await engine.publish_workflow(approval("v2"))
    url = "/api/ai/workflows/refund/runs/migrate"
    dry = await api.post(url, json={"dry_run": True, "run_ids": [str(ids[0])]})
    assert dry.status_code == 200, dry.text
    assert dry.json()["moved"] == [{"run_id": str(ids[0]), "from_version": 1}] and dry.json()["dry_run"]
    missing = await api.post(url, json={"to_version": 9})
    assert missing.status_code == 422 and missing.json()["error"]["code"] == "version_not_found"
    assert (await api.post(url, json={"colour": "red"})).status_code == 422
    moved = await api.post(url, json={"run_ids": [str(ids[0])]})
    assert moved.json()["to_version"] == 2 and len(moved.json()["moved"]) == 1
    assert await versions(engine, ids) == [2, 1]
    env = cli_env(database_url)
    shown = run_cli(["runs", "migrate", "refund", "--from", "1", "--dry-run"], env)
    assert shown.returncode == 0 and f"would move run {ids[1]}: v1 -> v2" in shown.stdout, (
        shown.stdout + shown.stderr
    )
    done = run_cli(["runs", "migrate", "refund", "--run", str(ids[1])[:8]], env)
    assert done.returncode == 0 and "1 moved, 0 refused" in done.stdout
    assert await versions(engine, ids) == [2, 2]
