"""``GET /api/ai/workflows`` names each workflow's newest run (issue 15: the console's workflow
list shows it), a loop's items aside."""

from __future__ import annotations

import httpx

from agentflow.api.app import create_app
from agentflow.engine import Engine
from agentflow.runtime.worker import Worker
from tests.integration.test_reruns import billing, counted, flow


async def test_the_workflow_list_names_each_workflows_newest_run_not_a_loop_item(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(billing("g"))
    await engine.publish_workflow(flow("idle", counted("x", "g:x")))
    await engine.publish_workflow(
        flow(
            "looped",
            {"id": "loop", "type": "for_each", "items": "{{ range(3) | list }}"},
            counted("item", "g:item"),
            edges=[{"from": "loop", "port": "iteration", "to": "item"}],
        )
    )
    first = await engine.wait_for_run((await engine.start_run("billing", {})).id, timeout=30)
    newest = await engine.wait_for_run((await engine.start_run("billing", {})).id, timeout=30)
    looped = await engine.wait_for_run((await engine.start_run("looped", {})).id, timeout=30)
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as api:
        listed = {w["name"]: w for w in (await api.get("/api/ai/workflows")).json()["workflows"]}
    assert listed["billing"]["last_run"]["id"] == str(newest.id) != str(first.id)
    assert listed["billing"]["last_run"]["status"] == "completed"
    assert listed["looped"]["last_run"]["id"] == str(looped.id), (
        "its items are newer, but no runs of their own"
    )
    assert listed["idle"]["last_run"] is None
