"""A workflow's graph drawn on its page (issue 15): every node in a column after the nodes that
lead to it, branch ports labelled, the entry marked, attached nodes hung under their agent."""

from __future__ import annotations

import re

from playwright.async_api import Browser, expect

from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.browser.test_console import shot
from tests.integration.test_graph_runs import DIAMOND
from tests.integration.test_workflow_graph_view import ATTACHED
from tests.support.http_server import serve


async def x_of(page, node: str) -> float:  # type: ignore[no-untyped-def]
    transform = await page.locator(f"#graph g[data-node='{node}']").get_attribute("transform")
    found = re.match(r"translate\(([\d.]+) ([\d.]+)\)", transform or "")
    assert found, transform
    return float(found.group(1))


async def test_the_graph_is_drawn_from_the_workflows_links(engine: Engine, browser: Browser) -> None:
    await engine.publish_workflow(DIAMOND)
    await engine.publish_workflow(ATTACHED)
    async with serve(create_app(engine)) as base:
        page = await browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        await page.goto(base + "/#/workflows/diamond")
        graph = page.locator("#graph")
        await expect(graph.locator("g.node")).to_have_count(6)
        await expect(graph).to_have_attribute("aria-label", "Graph of 6 nodes and 7 links")
        await expect(graph.locator("g.node.entry")).to_have_attribute("data-node", "route")
        await expect(graph.locator("g[data-link='route.big->audit'] text.port")).to_have_text("big")
        await expect(graph.locator("g[data-link='route.default->small'] text.port")).to_have_text("default")
        await expect(graph.locator("g[data-link='join.result->done'] text")).to_have_count(0)
        columns = {n: await x_of(page, n) for n in ("route", "big", "small", "audit", "join", "done")}
        assert columns["route"] < columns["big"] == columns["small"] == columns["audit"] < columns["join"]
        assert columns["join"] < columns["done"]
        await shot(page, "12-graph-diamond")

        await page.goto(base + "/#/workflows/support")
        await expect(graph.locator("g.node.attached")).to_have_count(2)
        await expect(graph.locator("path[data-attached='helper->lookup']")).to_have_count(1)
        await expect(graph.locator("g[data-link='helper.result->done']")).to_have_count(1)
        assert errors == []
