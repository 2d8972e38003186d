"""The console's run list is live (issue 15): a filtered list shows runs as they come to match
it and drops those that stop matching, without a reload (``GET /api/runs/stream``)."""

from __future__ import annotations

from playwright.async_api import Browser, expect

from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.integration.test_run_list_stream import WAITING
from tests.support.agents import running_worker
from tests.support.http_server import serve


async def test_the_run_list_follows_its_runs(engine: Engine, browser: Browser) -> None:
    await engine.publish_workflow(WAITING)
    async with running_worker(engine), serve(create_app(engine)) as base:
        page = await browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        await page.goto(base + "/#/runs?status=waiting")
        await expect(page.locator("#run-list")).to_contain_text("No runs.")
        run = await engine.start_run("parked", {})
        row = page.locator(f"#runs tr[data-run='{run.id}']")
        await expect(row).to_be_visible(timeout=15000)  # it came to wait: the list shows it
        await expect(row.locator("[data-status]")).to_have_text("waiting")
        await engine.cancel_run(run.id)
        await expect(row).to_have_count(0, timeout=15000)  # canceled: it no longer matches
        await expect(page).to_have_url(base + "/#/runs?status=waiting"), "no navigation happened"
        assert errors == []


async def test_any_filter_of_the_api_can_be_asked_from_the_list(engine: Engine, browser: Browser) -> None:
    await engine.publish_workflow(WAITING)
    wanted = (await engine.start_run_once("parked", {}, conversation={"id": "C-1", "channel": "slack"})).run
    await engine.start_run_once("parked", {}, conversation={"id": "C-2", "channel": "slack"})
    async with serve(create_app(engine)) as base:
        page = await browser.new_page()
        await page.goto(base + "/#/runs")
        # The first load of a page: a CI machine still building images took over 5 s once.
        await expect(page.locator("#runs tbody tr")).to_have_count(2, timeout=30000)
        await page.fill("#filter-more", "conversation_id=C-1&channel=slack")
        await page.click("#run-filters button[type=submit]")
        await expect(page).to_have_url(base + "/#/runs?conversation_id=C-1&channel=slack")
        await expect(page.locator("#runs tbody tr")).to_have_count(1)
        await expect(page.locator(f"#runs tr[data-run='{wanted.id}']")).to_be_visible()
        # Both have fields of their own: the page shows them there.
        await expect(page.locator("#filter-conversation_id")).to_have_value("C-1")
        await expect(page.locator("#filter-channel")).to_have_value("slack")
        await expect(page.locator("#filter-more")).to_have_value("")
        await page.fill("#filter-more", "tokens[gte]=many")
        await page.click("#run-filters button[type=submit]")
        await expect(page.locator(".errors")).to_contain_text("query_parameter_invalid")
        await expect(page.locator(".errors")).to_contain_text("tokens")
