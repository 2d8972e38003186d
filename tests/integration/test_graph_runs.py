"""Graph runs on the real database: parallel branches, joins, skipped branches, waits in a
branch, a finish that ends the run, retry from the failed activation."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.api.app import create_app
from agentflow.core.errors import ConfigError
from agentflow.engine import Engine
from agentflow.runtime.worker import Worker
from tests.support.http_server import serve


def flow(name: str, *nodes: dict[str, Any], edges: list[tuple[str, str, str]]) -> dict[str, Any]:
    links = [{"from": s, "port": p, "to": t} for s, p, t in edges]
    return {"name": name, "kind": "structured", "nodes": list(nodes), "edges": links}


def echo(node_id: str, value: Any) -> dict[str, Any]:
    return {"id": node_id, "type": "tool", "tool": "echo", "args": {"value": value}}


def branch_with_a_wait(name: str, duration: str) -> dict[str, Any]:
    """Two branches joined by a merge: one waits ``duration`` before its step, one works."""
    return flow(
        name,
        echo("start", 1),
        {"id": "nap", "type": "wait", "duration": duration},
        echo("after_nap", "woke"),
        echo("busy", "worked"),
        {"id": "join", "type": "merge", "combine": "list"},
        edges=[
            ("start", "result", "nap"),
            ("start", "result", "busy"),
            ("nap", "result", "after_nap"),
            ("after_nap", "result", "join"),
            ("busy", "result", "join"),
        ],
    )


async def completed(engine: Engine, name: str, payload: Any = None) -> Any:
    run = await engine.start_run(name, payload)
    done = await engine.wait_for_run(run.id, timeout=20)
    assert done.status == "completed", done.error
    return done


DIAMOND = flow(
    "diamond",
    {"id": "route", "type": "condition",
     "branches": [{"port": "big", "when": {"path": "input.total", "op": "gte", "value": 100}}]},
    echo("big", "{{ input.total }} is big"),
    echo("small", "{{ input.total }} is small"),
    echo("audit", "audited {{ input.total }}"),
    {"id": "join", "type": "merge"},
    {"id": "done", "type": "finish", "output": "{{ input }}"},
    edges=[("route", "big", "big"), ("route", "default", "small"), ("route", "big", "audit"),
           ("big", "result", "join"), ("small", "result", "join"), ("audit", "result", "join"),
           ("join", "result", "done")],
)  # fmt: skip


async def test_a_diamond_runs_the_chosen_branches_in_parallel_and_joins_without_the_skipped_one(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(DIAMOND)
    done = await completed(engine, "diamond", {"total": 500})
    assert done.output == {"big": {"value": "500 is big"}, "audit": {"value": "audited 500"}}
    steps = await engine.list_steps(done.id)
    assert [s.node_id for s in steps] == ["route", "big", "audit", "join", "done"]
    assert steps[3].input == {"joined": ["big", "audit"]}
    assert done.state["skipped"] == ["small"], "the branch not taken is recorded as skipped"
    other = await completed(engine, "diamond", {"total": 5})
    assert other.output == {"small": {"value": "5 is small"}}
    assert [s.node_id for s in await engine.list_steps(other.id)] == ["route", "small", "join", "done"]
    assert sorted(other.state["skipped"]) == ["audit", "big"]


async def test_merges_combine_as_a_list_or_deeply(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow(
            "combine",
            echo("start", 1),
            {"id": "a", "type": "mapping", "output": {"who": {"name": "Ann"}, "n": 1}},
            {"id": "b", "type": "mapping", "output": {"who": {"mail": "ann@example.com"}, "n": 2}},
            {"id": "as_list", "type": "merge", "combine": "list"},
            {"id": "deep", "type": "merge", "combine": "deep"},
            {"id": "both", "type": "merge"},
            {"id": "done", "type": "finish", "output": "{{ input }}"},
            edges=[
                ("start", "result", "a"),
                ("start", "result", "b"),
                ("a", "result", "as_list"),
                ("b", "result", "as_list"),
                ("a", "result", "deep"),
                ("b", "result", "deep"),
                ("as_list", "result", "both"),
                ("deep", "result", "both"),
                ("both", "result", "done"),
            ],
        )
    )
    done = await completed(engine, "combine")
    assert done.output == {
        "as_list": [{"who": {"name": "Ann"}, "n": 1}, {"who": {"mail": "ann@example.com"}, "n": 2}],
        "deep": {"who": {"name": "Ann", "mail": "ann@example.com"}, "n": 2},
    }


async def test_a_wait_in_one_branch_lets_the_other_go_on_and_the_join_waits_for_it(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(branch_with_a_wait("sleepy-branch", "1.5s"))
    run = await engine.start_run("sleepy-branch")
    await asyncio.sleep(0.7)
    mid = await engine.get_run(run.id)
    assert mid.status == "waiting" and mid.lease_owner is None, "only the timer is left: the run sleeps"
    assert [t["from"] for t in mid.state["timers"]] == ["nap"] and "at" in mid.state["timers"][0]
    assert "busy" in [s.node_id for s in await engine.list_steps(run.id)], "the other branch went on"
    done = await engine.wait_for_run(run.id, timeout=20)
    assert done.status == "completed", done.error
    assert done.output == [{"value": "worked"}, {"value": "woke"}]
    steps = {s.node_id: s for s in await engine.list_steps(run.id)}
    slept = (steps["after_nap"].started_at - steps["nap"].finished_at).total_seconds()
    assert slept >= 1.5, f"the wait fired after {slept:.3f}s"


async def test_a_finish_on_one_branch_ends_the_run(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow(
            "first-wins",
            echo("start", 1),
            {"id": "quick", "type": "finish", "output": "quick"},
            {"id": "slow", "type": "tool", "tool": "sleepy", "args": {"seconds": 0.1}},
            echo("later", "never"),
            edges=[("start", "result", "quick"), ("start", "result", "slow"), ("slow", "result", "later")],
        )
    )
    done = await completed(engine, "first-wins")
    assert done.output == "quick"
    assert [s.node_id for s in await engine.list_steps(done.id)] == ["start", "quick"]


async def test_a_retried_run_goes_on_from_its_failed_activation_keeping_completed_branches(
    engine: Engine, worker: Worker
) -> None:
    key = uuid.uuid4().hex
    await engine.publish_workflow(
        flow(
            "retry-branch",
            echo("start", 1),
            echo("steady", "done once"),
            {
                "id": "shaky",
                "type": "tool",
                "tool": "flaky",
                "args": {"key": key, "fail_times": 1},
                "retry": {"max_attempts": 1},
            },
            {"id": "join", "type": "merge"},
            edges=[
                ("start", "result", "steady"),
                ("start", "result", "shaky"),
                ("steady", "result", "join"),
                ("shaky", "result", "join"),
            ],
        )
    )
    run = await engine.start_run("retry-branch")
    failed = await engine.wait_for_run(run.id, timeout=20)
    assert failed.status == "failed"
    await engine.retry_run(run.id)
    done = await engine.wait_for_run(run.id, timeout=20)
    assert done.status == "completed", done.error
    assert done.output == {"steady": {"value": "done once"}, "shaky": {"calls": 2}}
    ran = [s.node_id for s in await engine.list_steps(run.id) if s.status == "completed"]
    assert ran.count("steady") == 1 and ran.count("start") == 1, ran


async def test_a_run_can_start_from_a_chosen_node_with_its_input(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(DIAMOND)
    run = await engine.start_run("diamond", {}, start_from="big", inputs={"total": 7})
    done = await engine.wait_for_run(run.id, timeout=20)
    assert done.status == "completed", done.error
    assert done.output == {"big": {"value": "7 is big"}}, "the join did not wait for branches that cannot run"
    assert [s.node_id for s in await engine.list_steps(run.id)] == ["big", "join", "done"]


async def test_starting_from_a_node_the_workflow_does_not_have_is_refused(engine: Engine) -> None:
    await engine.publish_workflow(DIAMOND)
    with pytest.raises(ConfigError) as info:
        await engine.start_run("diamond", {}, start_from="nowhere")
    assert info.value.info.code == "node_not_found"
    assert "no node 'nowhere'; its nodes: audit, big, done, join, route, small" in info.value.info.message
    assert await engine.list_runs(workflow="diamond") == [], "nothing was started"


async def test_the_api_starts_from_a_node_and_shows_each_nodes_summary(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(DIAMOND)
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:
        runs_url = "/api/ai/workflows/diamond/runs"
        started = await client.post(runs_url, json={"payload": {"total": 500}})
        assert started.status_code == 201, started.text
        await engine.wait_for_run(started.json()["id"], timeout=20)
        detail = (await client.get(f"{runs_url}/{started.json()['id']}")).json()
        assert detail["status"] == "completed" and detail["duration_ms"] > 0
        nodes = detail["nodes"]
        assert set(nodes) == {"route", "big", "audit", "small", "join", "done"}
        assert nodes["small"] == {
            "status": "skipped", "attempts": 0, "runs": 0, "started_at": None, "finished_at": None, "duration_ms": None,
        }  # fmt: skip
        assert (
            nodes["join"]["status"] == "completed"
            and nodes["join"]["runs"] == 1
            and nodes["join"]["duration_ms"] >= 0
        )
        from_node = await client.post(runs_url, json={"start_from_node": "small", "inputs": {"total": 3}})
        assert from_node.status_code == 201, from_node.text
        done = await engine.wait_for_run(from_node.json()["id"], timeout=20)
        assert done.output == {"small": {"value": "3 is small"}}
        missing = await client.post(runs_url, json={"start_from_node": "nope"})
        assert missing.status_code == 422 and missing.json()["error"]["code"] == "node_not_found", (
            missing.text
        )
