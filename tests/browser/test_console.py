"""The console in a real browser (Debian's Chromium driven by Playwright): publish a workflow
from YAML, start it, watch its timeline update live, answer its request in the inbox, see it
finish, filter the run list; a config with a mistake shows the error where it is.

Screenshots of each page go to ``test-artifacts/console/``.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
import yaml
from playwright.async_api import Browser, Page, expect

from agentflow.api.app import create_app
from agentflow.engine import Engine
from agentflow.integrations.smtp_sink import SmtpSink
from tests.conftest import make_settings
from tests.support.agents import running_worker
from tests.support.http_server import serve

SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"

APPROVAL_YAML = """name: refund
kind: structured
nodes:
  - id: ask
    type: user_input
    message: "Refund {{ payload.amount }} USD?"
    assignees: [lee]
  - {id: refunded, type: finish, output: "refunded by {{ input.responded_by }}"}
  - {id: declined, type: finish, output: "declined"}
edges:
  - {from: ask, port: approved, to: refunded}
  - {from: ask, port: rejected, to: declined}
"""


async def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


@pytest.mark.timeout(180)
async def test_a_person_runs_the_whole_job_from_the_browser(engine: Engine, browser: Browser) -> None:
    errors: list[str] = []
    async with running_worker(engine), serve(create_app(engine)) as base:
        page = await browser.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)

        # Publish from YAML.
        await page.goto(base + "/#/new")
        await page.fill("#yaml", APPROVAL_YAML)
        await page.click("#publish")
        await expect(page).to_have_url(re.compile(r"#/workflows/refund$"))
        await expect(page.locator("h1")).to_contain_text("refund")
        assert (await engine.get_workflow("refund")).latest_version == 1
        await shot(page, "1-workflow")

        # Start it: the run page shows it waiting for a person, and the inbox counts it.
        await page.fill("#payload", '{"amount": 120}')
        await page.click("#start")
        await expect(page).to_have_url(re.compile(r"#/runs/[0-9a-f-]+/[0-9a-f-]+$"))
        run_id = page.url.rsplit("/", 1)[1]
        await expect(page.locator("#run-status [data-status]")).to_have_attribute(
            "data-status", "waiting", timeout=20_000
        )
        await expect(page.locator("#timeline tr[data-node='ask']")).to_have_count(1)
        await expect(page.locator("#inbox-count")).to_have_text("1", timeout=10_000)
        await shot(page, "2-run-waiting")
        run_page = page.url

        # Answer in the inbox.
        await page.click("nav >> text=Inbox")
        card = page.locator("article[data-request]")
        await expect(card).to_have_count(1)
        await expect(card).to_contain_text("Refund 120 USD?")
        await card.locator("input[aria-label='Your name']").fill("lee")
        await shot(page, "3-inbox")
        await card.locator("button", has_text="Approve").click()
        await expect(page.locator("#inbox-empty")).to_be_visible()

        # The run page, live: it finishes without a reload.
        await page.goto(run_page)
        await expect(page.locator("#run-status [data-status]")).to_have_attribute(
            "data-status", "completed", timeout=20_000
        )
        await expect(page.locator("#run-output")).to_contain_text("refunded by lee")
        await expect(page.locator("#timeline tr[data-node='refunded']")).to_have_count(1)
        await shot(page, "4-run-completed")
        assert (await engine.get_run(run_id)).output == "refunded by lee"

        # Filter the run list; the filter lives in the URL.
        await page.click("nav >> text=Runs")
        await page.fill("#filter-status", "completed")
        await page.click("#run-filters button[type=submit]")
        await expect(page).to_have_url(re.compile(r"#/runs\?status=completed$"))
        await expect(page.locator("main[data-view='#/runs?status=completed']")).to_have_count(1)
        await expect(page.locator(f"#runs tr[data-run='{run_id}']")).to_have_count(1)
        await page.fill("#filter-status", "failed")
        await page.click("#run-filters button[type=submit]")
        await expect(page.locator("main[data-view='#/runs?status=failed']")).to_contain_text("No runs.")
        await shot(page, "5-runs-filtered")

        # A second version, its diff with the first, and a roll back to the first.
        await page.goto(base + "/#/workflows/refund")
        await page.fill(
            "#yaml",
            APPROVAL_YAML.replace("Refund {{ payload.amount }} USD?", "Pay back {{ payload.amount }}?"),
        )
        await page.click("#publish")
        await expect(page.locator("#versions tr[data-version='2']")).to_contain_text("latest")
        await page.locator("#versions tr[data-version='1'] button.diff").click()
        await expect(page.locator("#diff")).to_contain_text("nodes[id=ask].message: changed")
        await expect(page.locator("#diff pre")).to_contain_text("+    message: Pay back")
        await shot(page, "5b-versions-diff")
        await page.locator("#versions tr[data-version='1'] button.rollback").click()
        await expect(page.locator("#versions tr[data-version='3']")).to_contain_text("latest")
        assert "Refund" in str((await engine.get_version("refund")).config["nodes"][0]["message"])

        # A mistake is shown with its path and its line, and nothing is published.
        await page.goto(base + "/#/new")
        broken = "name: broken\nkind: structured\nnodes:\n  - id: a\n    type: tool\n    tool: echo\n"
        await page.fill("#yaml", broken + "  - id: b\n    type: teleport\n")
        await page.click("#publish")
        await expect(page.locator(".errors")).to_contain_text("nodes[1].type")
        at = page.locator(".errors button.at-line")
        await expect(at).to_have_text("line 8")
        await at.click()
        chosen = await page.evaluate(
            "() => { const a = document.getElementById('yaml');"
            " return [document.activeElement === a, a.value.slice(a.selectionStart, a.selectionEnd)]; }"
        )
        assert chosen == [True, "    type: teleport"], chosen
        await shot(page, "6-config-error")
    assert [w.name for w in await engine.list_workflows()] == ["refund"]
    # Nothing failed in the page but the publish the test meant to fail (422).
    assert [e for e in errors if "status of 422" not in e] == [], errors


@pytest.mark.timeout(120)
async def test_an_emailed_link_opens_a_page_that_answers_the_request(
    database_url: str, browser: Browser, tmp_path: Path
) -> None:
    flow = APPROVAL_YAML.replace("name: refund", "name: refund-by-mail").replace(
        "assignees: [lee]", "assignees: [lee@example.com]\n    channels: [in_app, email]"
    )
    with SmtpSink(jsonl_path=tmp_path / "mail.jsonl") as sink:
        settings = make_settings(database_url, smtp_url=sink.url, smtp_from="agentflow@example.com")
        engine = await Engine.connect(settings, migrate_schema=False)
        try:
            await engine.publish_workflow(yaml.safe_load(flow))
            async with running_worker(engine), serve(create_app(engine)) as base:
                run = await engine.start_run("refund-by-mail", {"amount": 75})
                link = await _mailed_link(sink)
                fragment = link.split("/answer", 1)[1]  # the link's origin is the default public URL
                forged = await browser.new_page()
                await forged.goto(base + "/answer" + fragment.rsplit("token=", 1)[0] + "token=forged")
                await expect(forged.locator("#answer-error")).to_contain_text("link_invalid")
                page = await browser.new_page()
                await page.goto(base + "/answer" + fragment)
                await expect(page.locator("#message")).to_have_text("Refund 75 USD?")
                await expect(page.locator("main")).not_to_contain_text("null")
                await shot(page, "7-emailed-link")
                await page.fill("#reason", "within policy")
                await page.click("#approve")
                await expect(page.locator("#answered")).to_have_attribute("data-status", "approved")
                await shot(page, "8-emailed-link-answered")
                done = await engine.wait_for_run(run.id, timeout=30)
        finally:
            await engine.close()
    assert done.output == "refunded by lee@example.com"


async def _mailed_link(sink: SmtpSink) -> str:
    for _ in range(300):
        for message in sink.messages:
            found = re.search(r"http://\S+/answer#request=\S+", message.body)
            if found:
                return found.group(0)
        await asyncio.sleep(0.05)
    raise AssertionError("no email with a link arrived")


async def test_the_console_page_allows_only_its_own_scripts(engine: Engine) -> None:
    import httpx

    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:
        page = await client.get("/")
        script = await client.get("/console/app.js")
        missing = await client.get("/console/nothing.js")
    assert page.status_code == 200 and "agentflow" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert missing.status_code == 404


@pytest.mark.timeout(120)
async def test_the_run_page_follows_the_run_through_its_stream(engine: Engine, browser: Browser) -> None:
    await engine.publish_workflow(yaml.safe_load(NAPPER_YAML))
    async with running_worker(engine), serve(create_app(engine)) as base:
        run = await engine.start_run("napper", {})
        page = await browser.new_page()
        asked: list[str] = []
        said: list[str] = []  # what the page logged and which requests failed, for a failure's message
        page.on("request", lambda request: asked.append(request.url))
        page.on("console", lambda message: said.append(f"console {message.type}: {message.text}"))
        page.on("requestfailed", lambda request: said.append(f"failed {request.url}: {request.failure}"))
        page.on("pageerror", lambda exc: said.append(f"error: {exc}"))
        await page.goto(f"{base}/#/runs/{run.workflow_id}/{run.id}")
        # Generous: on a CI machine shared by three lanes and an image build, the page once
        # took over 20 s to load, and once stayed at "Loading…" for 60 s (2026-12-07; what it
        # had asked for and logged is in the message now).
        try:
            await expect(page.locator("#run-status [data-status]")).to_have_attribute(
                "data-status", "waiting", timeout=60_000
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nrequests: {asked}\npage: {said}") from None
        # The run waits for this event (not a timer), so a slow page load cannot miss the wait.
        await engine.events.publish([{"topic": "nap.over", "message_id": "wake-1", "data": {}}])
        await expect(page.locator("#run-status [data-status]")).to_have_attribute(
            "data-status", "completed", timeout=20_000
        )
        await expect(page.locator("#timeline tr[data-node='end']")).to_have_count(1)
    reads = [u for u in asked if u.endswith(f"/runs/{run.id}")]
    streams = [u for u in asked if u.endswith(f"/runs/{run.id}/stream")]
    assert len(reads) == 1 and len(streams) == 1, (reads, streams)  # one read, then the stream


NAPPER_YAML = """name: napper
kind: structured
nodes:
  - {id: nap, type: wait, duration: 120s, for_event: {topic: nap.over}}
  - {id: end, type: finish, output: rested}
"""


@pytest.mark.timeout(120)
async def test_a_workflow_is_retired_from_its_page_with_who_uses_it_in_view(
    engine: Engine, browser: Browser
) -> None:
    await engine.publish_workflow(
        {"name": "child", "kind": "structured", "nodes": [{"id": "end", "type": "finish", "output": 1}]}
    )
    await engine.publish_workflow(
        {
            "name": "caller",
            "kind": "structured",
            "nodes": [{"id": "c", "type": "run_workflow", "workflow": "child"}],
        }
    )
    errors: list[str] = []
    async with serve(create_app(engine)) as base:
        page = await browser.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
        await page.goto(base + "/#/workflows/child")
        await expect(page.locator("#used-by")).to_contain_text("caller v1")
        await expect(page.locator("#workflow-state")).to_have_text("enabled")
        await page.click("#archive")
        await expect(page.locator("#lifecycle-result .errors")).to_contain_text("resource_in_use")
        assert (await engine.get_workflow("child")).archived_at is None  # refused: nothing changed
        await shot(page, "9-archive-refused")
        await page.click("#force")
        await expect(page.locator("#workflow-state")).to_have_text("archived")
        assert (await engine.get_workflow("child")).archived_at is not None
        await page.goto(base + "/#/workflows")
        await expect(page.locator("main")).not_to_contain_text("child")
        await page.click("#show-archived")
        await expect(page.locator("main h1")).to_have_text("Archived workflows")
        await expect(page.locator("main table")).to_contain_text("archived")
        await page.goto(base + "/#/workflows/caller")
        await expect(page.locator("#used-by")).to_contain_text("No other workflow")
        await page.click("#delete")
        await expect(page).to_have_url(re.compile(r"#/workflows$"))
        await shot(page, "10-deleted")
    assert [w.name for w in await engine.list_workflows(archived=None)] == ["child"]
    assert [e for e in errors if "status of 409" not in e] == [], errors
