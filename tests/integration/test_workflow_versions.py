"""Versions over the API (issue 15): list them, compare two, roll back to one."""

from __future__ import annotations

from typing import Any

import httpx

from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.support.http_server import serve


def config(message: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "refund",
        "kind": "structured",
        "nodes": [
            {"id": "ask", "type": "user_input", "message": message},
            {"id": "done", "type": "finish", "output": "{{ input.outcome }}"},
        ],
        "edges": [
            {"from": "ask", "port": "approved", "to": "done"},
            {"from": "ask", "port": "rejected", "to": "done"},
        ],
        **extra,
    }


async def test_versions_are_listed_compared_and_rolled_back(engine: Engine) -> None:
    await engine.publish_workflow(config("Refund?"))
    await engine.publish_workflow(config("Refund now?", retry={"max_attempts": 5}))
    pinned = await engine.start_run("refund", {})  # on v2; a rollback leaves it there
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as api:
        listed = (await api.get("/api/ai/workflows/refund/versions")).json()
        diff = (await api.get("/api/ai/workflows/refund/versions/1/diff/latest")).json()
        rolled = await api.post("/api/ai/workflows/refund/rollback", json={"version": 1})
        again = await api.post("/api/ai/workflows/refund/rollback", json={"version": 1})
        missing = await api.post("/api/ai/workflows/refund/rollback", json={"version": 9})
        bad = await api.get("/api/ai/workflows/refund/versions/1/diff/nope")
        after = (await api.get("/api/ai/workflows/refund/versions")).json()
        back = (await api.get("/api/ai/workflows/refund/versions/1/diff/3")).json()
    assert [(v["version"], v["latest"]) for v in listed["versions"]] == [(2, True), (1, False)]
    assert (diff["before"], diff["after"]) == (1, 2)
    assert {(c["path"], c["change"]) for c in diff["changes"]} == {
        ("nodes[id=ask].message", "changed"),
        ("retry.max_attempts", "changed"),
    }
    assert "-  message: Refund?\n" in diff["unified"] and "+  message: Refund now?\n" in diff["unified"]
    assert rolled.status_code == 201 and rolled.json()["version"] == 3 and rolled.json()["created"] is True
    assert again.status_code == 200 and again.json()["version"] == 3 and again.json()["created"] is False
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "version_not_found"
    assert bad.status_code == 404
    assert [v["version"] for v in after["versions"]] == [3, 2, 1]
    assert back["changes"] == [], "v3 is v1's config"
    assert (await engine.get_run(pinned.id)).workflow_version == 2
