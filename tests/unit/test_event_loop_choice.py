"""``AGENTFLOW_EVENT_LOOP``: the CLI's processes run on uvloop where it is installed, on the
standard loop when asked, and a bad value is a clear error (``cli.common.choose_event_loop``)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator

import pytest

from agentflow.cli.common import choose_event_loop, run_loop
from agentflow.core.errors import ConfigError


@pytest.fixture(autouse=True)
def default_loop() -> Iterator[None]:
    yield
    choose_event_loop("auto")


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_auto_and_uvloop_run_on_uvloop_where_it_is_installed() -> None:
    for choice in ("auto", " UVLOOP ", ""):
        choose_event_loop(choice)
        assert run_loop(loop_module()).startswith("uvloop"), choice


def test_asyncio_runs_on_the_standard_loop() -> None:
    choose_event_loop("asyncio")
    assert run_loop(loop_module()).startswith("asyncio")


def test_a_bad_choice_names_the_choices() -> None:
    with pytest.raises(ConfigError, match="use one of auto, uvloop, asyncio") as raised:
        choose_event_loop("trio")
    assert raised.value.info.code == "event_loop_invalid"


def test_without_uvloop_auto_falls_back_and_uvloop_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if it were not installed
    choose_event_loop("auto")
    assert run_loop(loop_module()).startswith("asyncio")
    with pytest.raises(ConfigError, match="not installed"):
        choose_event_loop("uvloop")
