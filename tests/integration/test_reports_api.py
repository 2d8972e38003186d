"""Impact reports through a real server, and `agentflow report` as a process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.api.deps import WORKSPACE_HEADER
from agentflow.engine import Engine
from tests.support.cli import cli_env, invoke_cli
from tests.support.http_server import error_code, serve
from tests.support.report_data import Seeded, seed


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        serve(create_app(engine)) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=30) as http,
    ):
        yield http


@pytest.fixture
async def seeded(engine: Engine) -> Seeded:
    return await seed(engine)


async def test_a_workflow_report(client: httpx.AsyncClient, seeded: Seeded) -> None:
    response = await client.get("/api/ai/workflows/renewals/report", params={"from": "7d"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["workflow_id"] == str(seeded.renewals) and body["workflow_name"] == "renewals"
    f = body["figures"]
    assert (f["meetings_analysed"], f["action_items"], f["accounts"], f["tasks_created"],
            f["tasks_completed_on_time"], f["notifications_sent"], f["plans_generated"]) == (4, 5, 2, 5, 2, 3, 1)  # fmt: skip
    assert (f["total_tokens"], f["usd_cost"]) == (1800, "0.015000")
    assert body["minutes_saved"] == 72.0 and body["minutes_by_action"]["plan_generated"] == 20.0
    assert "~1h 12m of human work" in body["summary"] and body["until"] is None
    by_id = (await client.get(f"/api/ai/workflows/{seeded.renewals}/report", params={"from": "7d"})).json()
    assert by_id["figures"] == f
    acme = (
        await client.get("/api/ai/workflows/renewals/report", params={"account": "acme", "from": "7d"})
    ).json()
    assert acme["account_id"] == "acme" and acme["figures"]["tasks_created"] == 3
    ranged = await client.get(
        "/api/ai/workflows/renewals/report", params={"from": "2000-01-01", "to": "2000-02-01T00:00:00Z"}
    )
    assert ranged.status_code == 200 and ranged.json()["figures"]["runs"] == 0
    assert ranged.json()["since"].startswith("2000-01-01T00:00:00")


async def test_the_workspace_report(client: httpx.AsyncClient, seeded: Seeded) -> None:
    body = (await client.get("/api/reports/impact", params={"from": "7d"})).json()
    assert [w["workflow_name"] for w in body["workflows"]] == ["followups", "renewals"]
    assert body["figures"]["accounts"] == 3 and body["minutes_saved"] == 79.0
    one = (await client.get("/api/reports/impact", params={"workflow": "followups"})).json()
    assert one["workflow_name"] == "followups" and one["figures"]["tasks_created"] == 1
    theirs = (
        await client.get("/api/reports/impact", headers={WORKSPACE_HEADER: str(seeded.other_workspace)})
    ).json()
    assert theirs["figures"]["runs"] == 1 and theirs["figures"]["input_tokens"] == 11


@pytest.mark.parametrize(
    ("path", "params", "status", "code"),
    [
        ("/api/ai/workflows/renewals/report", {"from": "last week"}, 422, "report_period_invalid"),
        ("/api/ai/workflows/renewals/report", {"from": "2d", "to": "3d"}, 422, "report_period_invalid"),
        ("/api/reports/impact", {"to": "2026-02-30"}, 422, "report_period_invalid"),
        ("/api/reports/impact", {"from": "x" * 101}, 422, "invalid_request"),
        ("/api/reports/impact", {"account": "x" * 201}, 422, "invalid_request"),
        ("/api/ai/workflows/plain/report", {}, 422, "workflow_not_agent"),
        ("/api/reports/impact", {"workflow": "plain"}, 422, "workflow_not_agent"),
        ("/api/ai/workflows/nope/report", {}, 404, "workflow_not_found"),
        # NUL is refused at the boundary for every path and query (test_bad_input.py).
        ("/api/ai/workflows/%00/report", {}, 400, "unstorable_text"),
        ("/api/reports/impact", {"workflow": "bad\u0000name"}, 400, "unstorable_text"),
        ("/api/reports/impact", {"account": "a\u0000b"}, 400, "unstorable_text"),
    ],
)
async def test_bad_requests(
    client: httpx.AsyncClient, seeded: Seeded, path: str, params: dict[str, str], status: int, code: str
) -> None:
    assert error_code(await client.get(path, params=params), status) == code


async def test_another_workspaces_workflow_is_404(
    client: httpx.AsyncClient, engine: Engine, seeded: Seeded
) -> None:
    foreign = {WORKSPACE_HEADER: str(seeded.other_workspace)}
    response = await client.get(f"/api/ai/workflows/{seeded.renewals}/report", headers=foreign)
    assert error_code(response, 404) == "workflow_not_found"


async def test_cli_report(engine: Engine, database_url: str) -> None:
    await seed(engine)
    env = cli_env(database_url)
    shown = invoke_cli(["report", "--workflow", "renewals", "--since", "7d"], env)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    for part in ("Impact of renewals", "Meetings analysed 4", "Action items 5 across 2 accounts",
                 "completed on time 2", "Notifications sent 3", "Plans 1", "~1h 12m of human work",
                 "1,800 tokens", "$0.0150"):  # fmt: skip
        assert part in shown.stdout, part
    everything = invoke_cli(["report"], env)
    assert everything.returncode == 0 and "followups" in everything.stdout and "renewals" in everything.stdout
    as_json = invoke_cli(["report", "--account", "acme", "--since", "7d", "--json"], env)
    assert as_json.returncode == 0, as_json.stderr
    body = json.loads(as_json.stdout)
    assert body["account_id"] == "acme" and body["figures"]["tasks_created"] == 3
    bad = invoke_cli(["report", "--since", "yesterday"], env)
    assert bad.returncode == 1 and "report_period_invalid" in bad.stderr and "Traceback" not in bad.stderr
    missing = invoke_cli(["report", "--workflow", "nope"], env)
    assert missing.returncode == 1 and "workflow_not_found" in missing.stderr
