"""for_each on the real database: items as child runs, concurrency, order, failures."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.api.app import create_app
from agentflow.engine import Engine
from agentflow.runtime.worker import Worker
from agentflow.store import runs
from tests.support.http_server import serve


def loop_flow(name: str, items: str = "{{ payload.rows }}", **loop: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "structured",
        "nodes": [
            {"id": "each", "type": "for_each", "items": items, **loop},
            {"id": "double", "type": "tool", "tool": "add", "args": {"a": "{{ input }}", "b": "{{ input }}"}},
            {"id": "label", "type": "tool", "tool": "echo", "args": {"value": "{{ input }}!"}},
            {
                "id": "summary",
                "type": "finish",
                "output": {"results": "{{ input }}", "count": "{{ input | length }}"},
            },
        ],
        "edges": [
            {"from": "each", "port": "iteration", "to": "double"},
            {"from": "double", "to": "label"},
            {"from": "each", "port": "done", "to": "summary"},
        ],
    }


async def children(engine: Engine, run_id: Any) -> list[dict[str, Any]]:
    rows = await engine.db.pool.fetch(
        "SELECT item_index, status, output, parent_step FROM runs WHERE parent_run_id = $1 ORDER BY item_index",
        run_id,
    )
    return [dict(r) for r in rows]


async def test_each_item_runs_the_body_as_a_child_run_and_the_results_join_in_order(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(loop_flow("doubling", concurrency=3))
    rows = list(range(1, 8))
    run = await engine.start_run("doubling", {"rows": rows})
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "completed", done.error
    assert done.output == {"results": [{"value": f"{2 * i}!"} for i in rows], "count": 7}
    kids = await children(engine, run.id)
    assert [k["item_index"] for k in kids] == list(range(7)) and {k["status"] for k in kids} == {"completed"}
    assert len({k["parent_step"] for k in kids}) == 1
    steps = await engine.list_steps(run.id)
    assert next(s.node_id for s in steps if s.node_id is not None) == "each"
    assert steps[-1].node_id == "summary"


async def test_loop_items_are_listed_under_their_run_not_among_the_workflows_runs(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(loop_flow("listed", concurrency=5))
    run = await engine.start_run("listed", {"rows": list(range(5))})
    assert (await engine.wait_for_run(run.id, timeout=30)).status == "completed"
    assert [r.id for r in await engine.list_runs(workflow="listed")] == [run.id]
    items = await engine.list_runs(workflow="listed", loop_of=run.id)
    assert sorted(r.item_index or 0 for r in items) == list(range(5))
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:
        top = (await client.get("/api/ai/workflows/listed/runs")).json()
        looped = (await client.get("/api/ai/workflows/listed/runs", params={"loop_of": str(run.id)})).json()
        bad = await client.get("/api/ai/workflows/listed/runs", params={"loop_of": "nope"})
    assert [r["id"] for r in top["runs"]] == [str(run.id)]
    assert {r["parent_activation_id"] for r in looped["runs"]} == {f"{run.id}:{items[0].parent_step}"}
    assert len(looped["runs"]) == 5
    assert bad.status_code == 422, bad.text
    child_steps = await engine.list_steps(await _child_id(engine, run.id, 0))
    assert [s.node_id for s in child_steps] == ["double", "label"]


async def _child_id(engine: Engine, run_id: Any, index: int) -> Any:
    return await engine.db.pool.fetchval(
        "SELECT id FROM runs WHERE parent_run_id = $1 AND item_index = $2", run_id, index
    )


async def test_no_more_than_concurrency_items_run_at_once(engine: Engine, worker: Worker) -> None:
    config = loop_flow("sleepy-loop", concurrency=2)
    config["nodes"][1] = {"id": "double", "type": "tool", "tool": "sleepy", "args": {"seconds": 0.2}}
    await engine.publish_workflow(config)
    run = await engine.start_run("sleepy-loop", {"rows": list(range(6))})
    most = 0
    while (await engine.get_run(run.id)).status not in ("completed", "failed"):
        running = await engine.db.pool.fetchval(
            "SELECT count(*) FROM runs WHERE parent_run_id = $1 AND status IN ('in_progress', 'waiting')"
            " AND due_at <> 'infinity'",
            run.id,
        )
        most = max(most, running)
        await asyncio.sleep(0.02)
    done = await engine.get_run(run.id)
    assert done.status == "completed", done.error
    assert done.output["count"] == 6
    assert 1 <= most <= 2, f"{most} items ran at once"


@pytest.mark.parametrize(
    ("mode", "results"),
    [("skip", [{"value": "2!"}, {"value": "6!"}]), ("collect", [{"value": "2!"}, "error", {"value": "6!"}])],
)
async def test_a_failed_item_is_skipped_or_collected(
    engine: Engine, worker: Worker, mode: str, results: list[Any]
) -> None:
    await engine.publish_workflow(loop_flow(f"lenient-{mode}", on_item_error=mode))
    run = await engine.start_run(f"lenient-{mode}", {"rows": [1, "not a number", 3]})
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "completed", done.error
    got = done.output["results"]
    if mode == "collect":
        assert got[1]["error"]["code"] and got[0] == results[0] and got[2] == results[2]
    else:
        assert got == results


async def test_a_failed_item_fails_the_loop_with_its_index_and_cancels_the_rest(
    engine: Engine, worker: Worker
) -> None:
    config = loop_flow("strict", concurrency=1)
    await engine.publish_workflow(config)
    run = await engine.start_run("strict", {"rows": [1, "x", 3, 4, 5]})
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "failed"
    assert done.error is not None and done.error["code"] == "loop_item_failed"
    assert done.error["details"]["index"] == 1 and "item 1 of for_each 'each' failed" in done.error["message"]
    await asyncio.sleep(0.3)
    kids = await children(engine, run.id)
    assert [k["status"] for k in kids][:2] == ["completed", "failed"]
    assert {k["status"] for k in kids[2:]} == {"canceled"}, "the items not yet run were canceled"


@pytest.mark.parametrize(
    ("payload", "code"), [({"rows": "abc"}, "loop_not_a_list"), ({"rows": list(range(6))}, "loop_too_large")]
)
async def test_a_loop_over_a_non_list_or_too_many_items_fails_naming_the_node(
    engine: Engine, worker: Worker, payload: dict[str, Any], code: str
) -> None:
    await engine.publish_workflow(loop_flow("bounded", max_items=5))
    run = await engine.start_run("bounded", payload)
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "failed" and done.error is not None and done.error["code"] == code
    assert "for_each 'each'" in done.error["message"]
    assert await children(engine, run.id) == []


async def test_an_empty_list_goes_straight_to_done(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(loop_flow("empty-loop"))
    run = await engine.start_run("empty-loop", {"rows": []})
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "completed" and done.output == {"results": [], "count": 0}


async def test_canceling_the_run_cancels_its_loop_items(engine: Engine, worker: Worker) -> None:
    config = loop_flow("cancelable", concurrency=2)
    config["nodes"][1] = {"id": "double", "type": "tool", "tool": "sleepy", "args": {"seconds": 0.3}}
    await engine.publish_workflow(config)
    run = await engine.start_run("cancelable", {"rows": list(range(10))})
    for _ in range(200):
        if len(await children(engine, run.id)) == 10:
            break
        await asyncio.sleep(0.02)
    await engine.cancel_run(run.id)
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "canceled"
    for _ in range(200):
        kids = await children(engine, run.id)
        if all(k["status"] in ("completed", "canceled") for k in kids):
            break
        await asyncio.sleep(0.05)
    statuses = [k["status"] for k in kids]
    assert statuses.count("canceled") >= 8, statuses
    assert set(statuses) <= {"completed", "canceled"}, statuses


async def test_loop_items_are_runs_the_api_shows_queued_ones_included(engine: Engine) -> None:
    config = loop_flow("shown", concurrency=1)
    # The first item holds the loop's one slot for a while: with a trivial body a loaded
    # machine let the worker go through two items before the test stopped it (CI, 2026-12-07),
    # and the third was no longer queued.
    config["nodes"][1] = {"id": "double", "type": "tool", "tool": "sleepy", "args": {"seconds": 2}}
    await engine.publish_workflow(config)
    run = await engine.start_run("shown", {"rows": [1, 2, 3]})
    w = engine.worker(concurrency=1)
    task = asyncio.create_task(w.run())
    try:
        for _ in range(200):
            if len(await children(engine, run.id)) == 3:
                break
            await asyncio.sleep(0.02)
    finally:
        w.stop()
        await asyncio.wait_for(task, 10)
    queued = await _child_id(engine, run.id, 2)
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:
        shown = await client.get(f"/api/ai/workflows/shown/runs/{queued}")
    assert shown.status_code == 200, shown.text
    body = shown.json()
    assert body["parent_run_id"] == str(run.id) and body["item_index"] == 2 and body["parent_step"] == 0
    assert body["parent_activation_id"] == f"{run.id}:0"
    assert body["status"] == "created"
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:
        parent = (await client.get(f"/api/ai/workflows/shown/runs/{run.id}")).json()
    loop_step = next(s for s in parent["steps"] if s["node_id"] == "each")
    assert loop_step["activation_id"] == body["parent_activation_id"], (
        "an item points at its loop's activation"
    )


async def test_loops_nest_and_bodies_branch(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        {
            "name": "nested",
            "kind": "structured",
            "nodes": [
                {"id": "rows", "type": "for_each", "items": "{{ payload.matrix }}", "concurrency": 2},
                {"id": "cells", "type": "for_each", "items": "{{ input }}", "concurrency": 3},
                {
                    "id": "route",
                    "type": "condition",
                    "branches": [{"port": "big", "when": {"path": "input", "op": "gte", "value": 10}}],
                },
                {"id": "big", "type": "tool", "tool": "echo", "args": {"value": "big {{ input }}"}},
                {"id": "small", "type": "tool", "tool": "echo", "args": {"value": "small {{ input }}"}},
                {"id": "cell_done", "type": "merge", "combine": "list"},
                {
                    "id": "row_done",
                    "type": "mapping",
                    "output": {"cells": "{{ input | map(attribute=0) | list }}"},
                },
                {"id": "all_done", "type": "finish", "output": "{{ input }}"},
            ],
            "edges": [
                {"from": "rows", "port": "iteration", "to": "cells"},
                {"from": "cells", "port": "iteration", "to": "route"},
                {"from": "route", "port": "big", "to": "big"},
                {"from": "route", "port": "default", "to": "small"},
                {"from": "big", "to": "cell_done"},
                {"from": "small", "to": "cell_done"},
                {"from": "cells", "port": "done", "to": "row_done"},
                {"from": "rows", "port": "done", "to": "all_done"},
            ],
        }
    )
    run = await engine.start_run("nested", {"matrix": [[1, 20], [30], [4, 5, 60]]})
    done = await engine.wait_for_run(run.id, timeout=60)
    assert done.status == "completed", done.error
    assert done.output == [
        {"cells": [{"value": "small 1"}, {"value": "big 20"}]},
        {"cells": [{"value": "big 30"}]},
        {"cells": [{"value": "small 4"}, {"value": "small 5"}, {"value": "big 60"}]},
    ]
    grandchildren = await engine.db.pool.fetchval(
        "SELECT count(*) FROM runs g JOIN runs c ON g.parent_run_id = c.id WHERE c.parent_run_id = $1", run.id
    )
    assert grandchildren == 6


async def test_canceling_a_run_cancels_the_items_of_its_nested_loops(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        {
            "name": "nested-cancel",
            "kind": "structured",
            "nodes": [
                {"id": "outer", "type": "for_each", "items": "{{ payload.matrix }}", "concurrency": 2},
                {"id": "inner", "type": "for_each", "items": "{{ input }}", "concurrency": 1},
                {"id": "slow", "type": "tool", "tool": "sleepy", "args": {"seconds": 0.3}},
            ],
            "edges": [
                {"from": "outer", "port": "iteration", "to": "inner"},
                {"from": "inner", "port": "iteration", "to": "slow"},
            ],
        }
    )
    run = await engine.start_run("nested-cancel", {"matrix": [list(range(8)), list(range(8))]})
    query = "SELECT count(*) FROM runs g JOIN runs c ON g.parent_run_id = c.id WHERE c.parent_run_id = $1"
    for _ in range(300):
        if await engine.db.pool.fetchval(query, run.id) == 16:
            break
        await asyncio.sleep(0.02)
    await engine.cancel_run(run.id)
    await asyncio.sleep(1.0)
    statuses = await engine.db.pool.fetch(
        "SELECT g.status FROM runs g JOIN runs c ON g.parent_run_id = c.id WHERE c.parent_run_id = $1", run.id
    )
    left = [r["status"] for r in statuses if r["status"] not in ("completed", "canceled")]
    assert left == [], left
    assert sum(r["status"] == "canceled" for r in statuses) >= 12


async def test_a_failed_loop_cancels_the_items_of_loops_nested_in_its_items(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(
        {
            "name": "nested-fail",
            "kind": "structured",
            "nodes": [
                {"id": "rows", "type": "for_each", "items": "{{ payload.rows }}", "concurrency": 2},
                {
                    "id": "route",
                    "type": "condition",
                    "branches": [{"port": "doomed", "when": {"path": "input", "op": "eq", "value": 0}}],
                },
                {"id": "pause", "type": "tool", "tool": "sleepy", "args": {"seconds": 1.5}},
                {"id": "boom", "type": "tool", "tool": "always_fails", "args": {"retryable": False}},
                {"id": "cells", "type": "for_each", "items": "{{ range(input) | list }}", "concurrency": 1},
                {"id": "slow", "type": "tool", "tool": "sleepy", "args": {"seconds": 0.5}},
            ],
            "edges": [
                {"from": "rows", "port": "iteration", "to": "route"},
                {"from": "route", "port": "doomed", "to": "pause"},
                {"from": "pause", "to": "boom"},
                {"from": "route", "port": "default", "to": "cells"},
                {"from": "cells", "port": "iteration", "to": "slow"},
            ],
        }
    )
    run = await engine.start_run("nested-fail", {"rows": [0, 6]})
    done = await engine.wait_for_run(run.id, timeout=60)
    assert done.status == "failed" and done.error["code"] == "loop_item_failed", done.error
    grandchildren = (
        "SELECT g.status FROM runs g JOIN runs c ON g.parent_run_id = c.id WHERE c.parent_run_id = $1"
    )
    statuses: list[str] = []
    for _ in range(200):
        statuses = [r["status"] for r in await engine.db.pool.fetch(grandchildren, run.id)]
        if statuses and all(s in ("completed", "canceled") for s in statuses):
            break
        await asyncio.sleep(0.1)
    assert len(statuses) == 6, "the nested loop had not started: the test proved nothing"
    assert set(statuses) <= {"completed", "canceled"} and "canceled" in statuses, statuses


async def test_items_not_let_run_yet_are_never_due_for_a_sleeping_worker(engine: Engine) -> None:
    await engine.publish_workflow(loop_flow("held-back", concurrency=1))
    run = await engine.start_run("held-back", {"rows": [1]})
    # What a worker sees when the only runs with a due time are items held back by their loop.
    await engine.db.pool.execute("UPDATE runs SET due_at = 'infinity' WHERE id = $1", run.id)
    assert await runs.seconds_to_next_due(engine.db.pool) is None


async def test_a_retried_run_runs_only_the_loop_items_that_did_not_complete(
    engine: Engine, worker: Worker
) -> None:
    tag = uuid.uuid4().hex
    await engine.publish_workflow(
        {
            "name": "retry-items",
            "kind": "structured",
            "nodes": [
                {"id": "each", "type": "for_each", "items": "{{ payload.rows }}", "concurrency": 1},
                {
                    "id": "body",
                    "type": "tool",
                    "tool": "flaky",
                    "args": {"key": tag + "-{{ input }}", "fail_times": "{{ 1 if input == 2 else 0 }}"},
                    "retry": {"max_attempts": 1},
                },
                {"id": "joined", "type": "finish", "output": "{{ input }}"},
            ],
            "edges": [
                {"from": "each", "port": "iteration", "to": "body"},
                {"from": "each", "port": "done", "to": "joined"},
            ],
        }
    )
    run = await engine.start_run("retry-items", {"rows": [1, 2, 3, 4]})
    failed = await engine.wait_for_run(run.id, timeout=30)
    assert failed.status == "failed" and failed.error["details"]["index"] == 1, failed.error
    await asyncio.sleep(0.3)
    assert [k["status"] for k in await children(engine, run.id)] == [
        "completed",
        "failed",
        "canceled",
        "canceled",
    ]
    await engine.retry_run(run.id)
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "completed", done.error
    # Item 0 kept its result (one call), item 1 ran again (its second call), the rest ran once.
    assert done.output == [{"calls": 1}, {"calls": 2}, {"calls": 1}, {"calls": 1}]
    assert len(await children(engine, run.id)) == 4, "the items are the same runs"
