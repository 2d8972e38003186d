"""The console's audit log and tasks (issue 15): who changed what, for the workspace and on a
workflow's page, filtered from the URL; tasks listed with the run that made them and completed
from the list, which the audit log then shows."""

from __future__ import annotations

import httpx
import yaml
from playwright.async_api import Browser, expect

from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.browser.test_console import APPROVAL_YAML, shot
from tests.integration.test_tasks_api import insert_task
from tests.support.http_server import serve


async def test_the_audit_log_and_tasks_in_the_console(engine: Engine, browser: Browser) -> None:
    flow = yaml.safe_load(APPROVAL_YAML)
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as api:
        assert (await api.post("/api/ai/workflows", json=flow)).status_code == 201
        assert (
            await api.patch(f"/api/ai/workflows/{flow['name']}", json={"enabled": False})
        ).status_code == 200
        task = await insert_task(engine, title="Call Acme back", assignee="lee@example.com")
        page = await browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))

        await page.goto(base + "/#/audit")
        rows = page.locator("#audit tbody tr")
        await expect(rows).to_have_count(2)
        await expect(rows.nth(0)).to_have_attribute("data-action", "workflow.update")
        await expect(rows.nth(0)).to_contain_text("enabled=false")
        await expect(rows.nth(1)).to_contain_text(f"workflow={flow['name']}")
        await expect(rows.nth(1)).to_contain_text("201")
        await page.fill("#audit-action", "workflow.publish")
        await page.click("#audit-filters button[type=submit]")
        await expect(page).to_have_url(f"{base}/#/audit?action=workflow.publish")
        await expect(rows).to_have_count(1)
        await shot(page, "10-audit-log")

        await page.goto(f"{base}/#/workflows/{flow['name']}")
        section = page.locator("section[aria-label='Audit log']")
        await expect(section.locator("tbody tr")).to_have_count(2)

        await page.goto(base + "/#/tasks?status=open")
        row = page.locator(f"#tasks tr[data-task='{task}']")
        await expect(row).to_contain_text("Call Acme back")
        await expect(row).to_contain_text("lee@example.com")
        await row.locator("button.complete").click()
        await expect(page.locator("#tasks")).to_have_count(0)  # no open task is left
        await shot(page, "11-tasks")
        assert (await engine.tasks.get(task)).status == "completed"

        await page.goto(base + "/#/audit?action=task")
        await expect(rows).to_have_count(1)
        await expect(rows.nth(0)).to_contain_text(f"task_id={task}")
        await expect(rows.nth(0)).to_contain_text("local")
        assert errors == []
