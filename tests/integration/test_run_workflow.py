"""run_workflow on the real database: child runs of other workflows, waited for or on their own."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any
from uuid import UUID

import httpx
import pytest

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.api.app import create_app
from agentflow.core.errors import ConfigError, NotFoundError
from agentflow.core.records import RunRecord
from agentflow.engine import Engine
from agentflow.runtime.worker import Worker
from tests.support.http_server import serve


def flow(name: str, *nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "nodes": list(nodes), **extra}


def doubler(name: str = "doubler", offset: int = 0) -> dict[str, Any]:
    """A child: doubles ``payload.n`` (plus ``offset``, to tell versions apart)."""
    return flow(
        name,
        {
            "id": "double",
            "type": "tool",
            "tool": "add",
            "args": {"a": "{{ payload.n }}", "b": "{{ payload.n }}"},
        },
        {"id": "done", "type": "finish", "output": {"doubled": f"{{{{ steps.double + {offset} }}}}"}},
        payload_format={"n": {"type": "number", "required": True}},
    )


def caller(name: str, **node: Any) -> dict[str, Any]:
    call = {"id": "call", "type": "run_workflow", "workflow": "doubler", "input": {"n": "{{ payload.n }}"}}
    return flow(
        name,
        {**call, **node},
        {"id": "done", "type": "finish", "output": {"child": "{{ input }}"}},
    )


async def child_of(engine: Engine, parent: UUID) -> RunRecord:
    found = await engine.db.pool.fetch("SELECT id FROM runs WHERE parent_run_id = $1", parent)
    assert len(found) == 1, found
    return await engine.get_run(found[0]["id"])


async def test_the_parent_waits_for_the_child_and_goes_on_with_its_output(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(doubler())
    await engine.publish_workflow(caller("parent"))
    run = await engine.start_run("parent", {"n": 21})
    done = await engine.wait_for_run(run.id, timeout=30)
    assert done.status == "completed", done.error
    assert done.output == {"child": {"doubled": 42}}
    child = await child_of(engine, run.id)
    assert child.status == "completed" and child.input == {"n": 21}
    assert child.caller_node == "call" and child.parent_step is not None
    assert child.workflow_id == (await engine.get_workflow("doubler")).id
    started = next(
        s for s in await engine.list_steps(run.id) if s.node_id == "call" and s.status == "completed"
    )
    assert started.output["run_id"] == str(child.id) and started.name == "doubler"
    # The child is a run of its own workflow, listed there (loop items are not).
    assert [r.id for r in await engine.list_runs(workflow="doubler")] == [child.id]
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:
        shown = (await client.get(f"/api/ai/workflows/doubler/runs/{child.id}")).json()
    assert shown["parent_run_id"] == str(run.id) and shown["caller_node"] == "call"


async def test_a_named_version_runs_that_version(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(doubler(offset=0))
    await engine.publish_workflow(doubler(offset=1000))
    await engine.publish_workflow(caller("pinned", version=1))
    await engine.publish_workflow(caller("latest"))
    pinned = await engine.wait_for_run((await engine.start_run("pinned", {"n": 1})).id, timeout=30)
    latest = await engine.wait_for_run((await engine.start_run("latest", {"n": 1})).id, timeout=30)
    assert pinned.output == {"child": {"doubled": 2}}
    assert latest.output == {"child": {"doubled": 1002}}


async def test_a_failed_child_fails_the_node_down_its_error_port_or_fails_the_run(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(
        flow("breaks", {"id": "boom", "type": "tool", "tool": "always_fails", "args": {"retryable": False}})
    )
    handled = caller("handles", workflow="breaks", input={})
    handled["nodes"].append({"id": "fallback", "type": "finish", "output": {"failed": "{{ input.code }}"}})
    handled["edges"] = [
        {"from": "call", "to": "done"},
        {"from": "call", "port": "error", "to": "fallback"},
    ]
    await engine.publish_workflow(handled)
    await engine.publish_workflow(caller("unhandled", workflow="breaks", input={}))
    ok = await engine.wait_for_run((await engine.start_run("handles", {})).id, timeout=30)
    assert ok.status == "completed" and ok.output == {"failed": "upstream_down"}
    failed = await engine.wait_for_run((await engine.start_run("unhandled", {})).id, timeout=30)
    assert failed.status == "failed" and failed.error is not None
    assert failed.error["code"] == "upstream_down" and "run_workflow node 'call'" in failed.error["message"]
    assert (await child_of(engine, failed.id)).status == "failed"


async def test_wait_false_starts_the_child_and_goes_on_at_once(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow(
            "slow",
            {"id": "nap", "type": "wait", "duration": "1s"},
            {"id": "end", "type": "finish", "output": "slept"},
        )
    )
    await engine.publish_workflow(caller("fire", workflow="slow", input={"from": "fire"}, wait=False))
    run = await engine.start_run("fire", {})
    done = await engine.wait_for_run(run.id, timeout=30)
    child = await child_of(engine, run.id)
    assert done.status == "completed"
    assert done.output == {
        "child": {
            "run_id": str(child.id),
            "workflow": "slow",
            "workflow_id": str(child.workflow_id),
            "version": 1,
        }
    }
    assert child.parent_step is None and child.caller_node == "call"
    assert (await engine.wait_for_run(child.id, timeout=30)).output == "slept"
    # Steps of the parent: the one that started the child, and the finish; no waiting.
    assert [s.node_id for s in await engine.list_steps(run.id)] == ["call", "done"]


async def test_canceling_the_parent_cancels_the_child_it_waits_for(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(flow("long", {"id": "nap", "type": "wait", "duration": "1h"}))
    await engine.publish_workflow(caller("waits", workflow="long", input={}))
    run = await engine.start_run("waits", {})
    for _ in range(300):
        kids = await engine.db.pool.fetch("SELECT status FROM runs WHERE parent_run_id = $1", run.id)
        if kids and kids[0]["status"] == "waiting":
            break
        await asyncio.sleep(0.05)
    child = await child_of(engine, run.id)
    await engine.cancel_run(run.id)
    assert (await engine.wait_for_run(run.id, timeout=30)).status == "canceled"
    assert (await engine.wait_for_run(child.id, timeout=30)).status == "canceled"


async def test_a_missing_draft_or_unknown_version_is_refused_at_publish(engine: Engine) -> None:
    await engine.publish_workflow(doubler())
    await engine.publish_workflow(flow("drafty", {"id": "end", "type": "finish", "output": 1}), draft=True)
    cases = [
        ({"workflow": "nowhere"}, "nodes[0].workflow", "no workflow named 'nowhere'"),
        ({"workflow": "drafty"}, "nodes[0].workflow", "is a draft"),
        ({"version": 7}, "nodes[0].version", "has no version 7 (its latest is 1)"),
    ]
    for node, path, words in cases:
        with pytest.raises(ConfigError) as info:
            await engine.publish_workflow(caller("refused", **node))
        (error,) = info.value.info.details["errors"]
        assert error["path"] == path and words in error["message"], error
    with pytest.raises(NotFoundError):
        await engine.get_workflow("refused")


async def test_a_child_made_a_draft_or_given_a_bad_input_is_a_step_error_with_its_fix(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(doubler())
    await engine.publish_workflow(flow("drafty", {"id": "end", "type": "finish", "output": 1}))
    cases = {
        "draft": ({"workflow": "drafty", "input": {}}, "child_workflow_draft"),
        "bad-input": ({"input": {"n": "twelve"}}, "child_payload_invalid"),
    }
    for name, (node, _) in cases.items():
        await engine.publish_workflow(caller(name, **node))
    await engine.set_flags("drafty", draft=True, force=True)  # forced: the callers (published first) use it
    for name, (_, code) in cases.items():
        done = await engine.wait_for_run((await engine.start_run(name, {"n": 1})).id, timeout=30)
        assert done.status == "failed" and done.error is not None, name
        assert done.error["code"] == code and done.error.get("solution"), done.error
        assert (
            await engine.db.pool.fetchval("SELECT count(*) FROM runs WHERE parent_run_id = $1", done.id) == 0
        )


async def test_max_depth_stops_a_workflow_that_runs_itself(engine: Engine, worker: Worker) -> None:
    recursive = flow(
        "recursive",
        {"id": "call", "type": "run_workflow", "workflow": "recursive", "max_depth": 3, "input": {}},
        {"id": "deeper", "type": "finish", "output": {"below": "{{ input }}"}},
        {"id": "bottom", "type": "finish", "output": {"stopped": "{{ input.code }}"}},
        edges=[{"from": "call", "to": "deeper"}, {"from": "call", "port": "error", "to": "bottom"}],
    )
    await engine.publish_workflow(recursive)
    done = await engine.wait_for_run((await engine.start_run("recursive", {})).id, timeout=60)
    assert done.status == "completed", done.error
    assert done.output == {"below": {"below": {"below": {"stopped": "run_depth_exceeded"}}}}
    assert (
        await engine.db.pool.fetchval("SELECT count(*) FROM runs WHERE workflow_id = $1", done.workflow_id)
        == 4
    )


async def test_a_runs_total_usage_counts_every_run_it_started(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(doubler())
    await engine.publish_workflow(
        flow(
            "fan",
            {"id": "each", "type": "for_each", "items": "{{ [1, 2] }}"},
            {"id": "call", "type": "run_workflow", "workflow": "doubler", "input": {"n": "{{ input }}"}},
            {"id": "done", "type": "finish", "output": "{{ input }}"},
            edges=[
                {"from": "each", "port": "iteration", "to": "call"},
                {"from": "each", "port": "done", "to": "done"},
            ],
        )
    )
    run = await engine.wait_for_run((await engine.start_run("fan", {})).id, timeout=30)
    assert run.status == "completed", run.error
    # Model use as checkpoints record it, on the run, its two loop items and their two children.
    tree = await engine.db.pool.fetch(
        "WITH RECURSIVE t AS (SELECT id FROM runs WHERE id = $1 UNION ALL"
        " SELECT r.id FROM runs r JOIN t ON r.parent_run_id = t.id) SELECT id FROM t",
        run.id,
    )
    assert len(tree) == 5
    for n, row in enumerate(tree, start=1):
        await engine.db.pool.execute(
            "UPDATE runs SET input_tokens = $2, output_tokens = $3, usd_cost = $4 WHERE id = $1",
            row["id"], 100 * n, 10 * n, n / 100,
        )  # fmt: skip
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:
        shown = (await client.get(f"/api/ai/workflows/fan/runs/{run.id}")).json()
        child = (await client.get(f"/api/ai/workflows/doubler/runs/{tree[-1]['id']}")).json()
    assert shown["input_tokens"] == 100, "the run's own use stays its own"
    total = shown["total_usage"]
    assert Decimal(total.pop("usd_cost")) == Decimal("0.15")
    assert total == {"runs": 5, "input_tokens": 1500, "output_tokens": 150, "cached_input_tokens": 0}
    assert child["total_usage"]["runs"] == 1 and child["total_usage"]["input_tokens"] == 500


async def _waiting_child(engine: Engine, parent: UUID) -> RunRecord:
    for _ in range(300):
        kids = await engine.db.pool.fetch("SELECT status FROM runs WHERE parent_run_id = $1", parent)
        if kids and kids[0]["status"] == "waiting":
            return await child_of(engine, parent)
        await asyncio.sleep(0.05)
    raise AssertionError("the child never waited")


async def test_a_child_canceled_on_its_own_wakes_its_parent_at_once(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(flow("long", {"id": "nap", "type": "wait", "duration": "1h"}))
    await engine.publish_workflow(caller("waits", workflow="long", input={}))
    run = await engine.start_run("waits", {})
    child = await _waiting_child(engine, run.id)
    # Let the parent grow quiet: its counts find nothing new, so it counts less often.
    while True:
        row = await engine.db.pool.fetchrow(
            "SELECT extract(epoch FROM due_at - now()) AS due_in, state FROM runs WHERE id = $1", run.id
        )
        if row["due_in"] is not None and row["due_in"] > 3.0:
            break
        await asyncio.sleep(0.1)
    assert row["state"]["loops"][0]["quiet"] >= 2
    await engine.cancel_run(child.id)
    loop = asyncio.get_running_loop()
    canceled_at = loop.time()
    ended = await engine.wait_for_run(run.id, timeout=30)
    assert ended.status == "failed" and ended.error is not None
    assert ended.error["code"] == "child_failed" and ended.error["details"]["status"] == "canceled"
    assert loop.time() - canceled_at < row["due_in"], "woken by the child's end, not by its next count"


async def test_a_long_child_costs_its_parent_a_few_counts_not_one_a_second(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(flow("slow", {"id": "nap", "type": "wait", "duration": "8s"}))
    await engine.publish_workflow(caller("waits", workflow="slow", input={}))
    run = await engine.start_run("waits", {})
    assert (await engine.wait_for_run(run.id, timeout=60)).status == "completed"
    counts = await engine.db.pool.fetchval(
        "SELECT count(*) FROM run_steps WHERE run_id = $1 AND node_id IS NULL", run.id
    )
    assert 1 <= counts <= 4, f"{counts} counts in 8 s (1, 2, 4 s apart: 3; one a second: 7)"
