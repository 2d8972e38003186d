"""The browser the console tests drive: Debian's Chromium through Playwright, headless."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright

CHROMIUM = os.environ.get("AGENTFLOW_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    assert Path(CHROMIUM).exists(), (
        f"no Chromium at {CHROMIUM}: apt-get install -y chromium (.ci/run does), or set AGENTFLOW_TEST_CHROMIUM"
    )
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        yield launched
        await launched.close()
