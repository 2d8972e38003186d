"""The console is accessible (issue 15: keyboard, labels, contrast): axe-core (the engine
behind most accessibility audits, bundled by ``axe-playwright-python``) finds no serious or
critical violation on any view, each shown with data in it; and the main views can be reached
and used from the keyboard alone."""

from __future__ import annotations

from typing import Any

import yaml
from axe_playwright_python.async_playwright import Axe
from playwright.async_api import Browser, Page, expect

from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.browser.test_console import APPROVAL_YAML
from tests.integration.test_graph_runs import DIAMOND
from tests.integration.test_tasks_api import insert_task
from tests.support.agents import running_worker, until
from tests.support.http_server import serve

SERIOUS = ("serious", "critical")


async def violations(page: Page) -> list[str]:
    """The serious and critical axe violations of what the page shows: rule, impact, where."""
    found: dict[str, Any] = (await Axe().run(page)).response
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes'][:3]]}"
        for v in found["violations"]
        if v["impact"] in SERIOUS
    ]


async def test_no_view_has_a_serious_accessibility_violation(engine: Engine, browser: Browser) -> None:
    await engine.publish_workflow(yaml.safe_load(APPROVAL_YAML))
    await engine.publish_workflow(DIAMOND)
    await insert_task(engine, title="Call Acme back", assignee="lee@example.com")
    async with running_worker(engine), serve(create_app(engine)) as base:
        run = await engine.start_run("refund", {"amount": 40})
        await until(engine, run.id, lambda r: r.status == "waiting")
        page = await browser.new_page()
        views = {
            "#/workflows": "#workflows, main table",
            "#/workflows/diamond": "#graph",
            "#/new": "#yaml",
            "#/runs": "#runs",
            f"#/runs/{run.workflow_id}/{run.id}": "#timeline",
            "#/inbox": "article.card",
            "#/tasks": "#tasks",
            "#/impact": "#chart-runs",
            "#/audit": "main h1",
        }
        found: dict[str, list[str]] = {}
        for view, shown in views.items():
            await page.goto(base + "/" + view)
            await expect(page.locator(shown).first).to_be_visible()
            found[view] = await violations(page)
        assert {view: v for view, v in found.items() if v} == {}


async def test_the_inbox_is_answered_from_the_keyboard(engine: Engine, browser: Browser) -> None:
    await engine.publish_workflow(yaml.safe_load(APPROVAL_YAML))
    async with running_worker(engine), serve(create_app(engine)) as base:
        run = await engine.start_run("refund", {"amount": 40})
        await until(engine, run.id, lambda r: r.status == "waiting")
        page = await browser.new_page()
        await page.goto(base + "/")
        await expect(page.locator("main")).to_contain_text("refund")
        # Skip link first, then the sections: Tab reaches them, Enter follows them.
        await page.keyboard.press("Tab")
        await expect(page.locator("a.skip")).to_be_focused()
        for _ in range(4):  # skip link, Workflows, Runs, Inbox
            await page.keyboard.press("Tab")
            if await page.evaluate("document.activeElement.dataset.section") == "inbox":
                break
        await page.keyboard.press("Enter")
        card = page.locator("article.card")
        await expect(card).to_have_count(1)
        await card.locator("input[aria-label='Your name']").focus()
        await page.keyboard.type("lee")
        await page.keyboard.press("Tab")  # the reason
        await page.keyboard.press("Tab")  # Approve
        await expect(card.locator("button", has_text="Approve")).to_be_focused()
        await page.keyboard.press("Enter")
        await expect(page.locator("#inbox-empty")).to_be_visible()
        done = await engine.wait_for_run(run.id, timeout=30)
    assert done.output == "refunded by lee"


async def test_the_audit_can_fail(engine: Engine, browser: Browser) -> None:
    """The negative control: an unlabelled field and grey-on-grey text are reported."""
    async with serve(create_app(engine)) as base:
        page = await browser.new_page()
        await page.goto(base + "/#/workflows")
        await expect(page.locator("main h1")).to_be_visible()
        await page.evaluate(
            """() => {
                const field = document.createElement("input");
                const faint = document.createElement("p");
                faint.textContent = "hard to read";
                faint.style.color = "#bbb";
                faint.style.background = "#ccc";
                document.querySelector("main").append(field, faint);
            }"""
        )
        found = await violations(page)
    assert any(v.startswith("label") for v in found) and any(v.startswith("color-contrast") for v in found), (
        found
    )
