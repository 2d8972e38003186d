"""The impact page (issue 15): the agents' summary, runs by status and tasks completed on time
charted per day, and cost per workflow, from the API's activity series; nothing the page's
Content-Security-Policy refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from playwright.async_api import Browser, expect

from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.browser.test_console import shot
from tests.integration.test_activity_report import FLOW, run_at
from tests.integration.test_tasks_api import insert_task
from tests.support.http_server import serve


async def test_the_impact_page_charts_runs_tasks_and_cost(engine: Engine, browser: Browser) -> None:
    await engine.publish_workflow(FLOW)
    await engine.publish_workflow({**FLOW, "name": "support"})
    recent = datetime.now(UTC) - timedelta(seconds=5)
    await run_at(engine, "billing", recent - timedelta(days=1), "completed", "2.00")
    await run_at(engine, "billing", recent, "failed", "1.00")
    await run_at(engine, "support", recent, "completed", "0.50")
    await insert_task(
        engine, title="t", status="completed", completed_at=recent, due_at=recent + timedelta(hours=1)
    )
    async with serve(create_app(engine)) as base:
        page = await browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        await page.goto(base + "/#/impact")
        await expect(page.locator("#impact-summary")).not_to_be_empty()
        runs = page.locator("#chart-runs")
        await expect(runs).to_have_attribute("aria-label", "Runs started per day by how they stand")
        await expect(runs.locator("rect[data-series='completed']")).to_have_count(2)  # two days
        await expect(runs.locator("rect[data-series='failed']")).to_have_attribute("data-value", "1")
        await expect(page.locator("#chart-tasks rect[data-series='on_time']")).to_have_attribute(
            "data-value", "1"
        )
        await expect(page.locator("#table-runs tbody tr")).to_have_count(15)  # 14 days back, and today
        costs = page.locator("#costs tbody tr")
        await expect(costs).to_have_count(2)
        await expect(costs.nth(0)).to_have_attribute("data-workflow", "billing")
        await expect(costs.nth(0)).to_contain_text("3.00")
        await shot(page, "13-impact")
        await page.click("text=last 48h by hour")
        await expect(page.locator("#chart-runs")).to_have_attribute(
            "aria-label", "Runs started per hour by how they stand"
        )
        assert errors == []
