"""A model that is not configured fails the agent's step at once, with the setting to fix.

Before: building the provider raised outside the step's error handling, the worker logged an
"unexpected worker error", and the run sat ``in_progress`` until its lease expired, again and
again, then failed as ``worker_lost`` with advice about memory.
"""

from __future__ import annotations

import time

import pytest

from agentflow.engine import Engine
from tests.conftest import make_settings
from tests.support.agents import agent_workflow, running_worker, until

KEY_VARIABLES = ("OPENAI_API_KEY", "AGENTFLOW_OPENAI_API_KEY", "AGENTFLOW_OPENAI_BASE_URL", "OPENAI_BASE_URL")


@pytest.fixture
def no_openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDK reads OPENAI_API_KEY itself and the settings read AGENTFLOW_OPENAI_API_KEY: a key
    # on the developer's machine must not make this test pass or fail.
    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


async def _fail_fast(database_url: str, model: str, **settings: object) -> tuple[dict[str, object], int]:
    """Run an agent workflow on ``model``; return its error and the number of step attempts."""
    engine = await Engine.connect(make_settings(database_url, **settings), migrate_schema=False)
    try:
        await engine.publish_workflow(agent_workflow(model=model))
        started = time.monotonic()
        async with running_worker(engine):
            run = await engine.start_run("meeting-follow-up", {"note": "hello"})
            # A lease (3 s in tests) must not be what ends the run: well under one.
            done = await until(engine, run.id, lambda r: r.status.is_terminal, timeout=10)
        elapsed = time.monotonic() - started
        steps = await engine.list_steps(run.id)
    finally:
        await engine.close()
    assert done.status == "failed", (done.status, done.error)
    assert done.rescues == 0, "the run was rescued after a lost lease instead of failing its step"
    assert elapsed < 5, f"took {elapsed:.1f} s"
    assert done.error is not None
    # A retryable error that ran out of attempts would say "attempts_exhausted".
    assert done.status_reason == done.error["code"]
    return done.error, len(steps)


@pytest.mark.usefixtures("no_openai_key")
async def test_a_missing_api_key_fails_the_step_at_once_naming_the_variable(database_url: str) -> None:
    error, attempts = await _fail_fast(database_url, "openai:gpt-4o-mini")
    assert error["code"] == "model_auth_missing"
    assert "AGENTFLOW_OPENAI_API_KEY" in str(error["message"])
    assert "OPENAI_API_KEY" in str(error["message"])
    assert attempts == 1


async def test_an_unknown_provider_fails_the_step_at_once(database_url: str) -> None:
    error, attempts = await _fail_fast(database_url, "mistral:large")
    assert error["code"] == "model_unknown"
    assert "openai, anthropic, gemini" in str(error["message"])
    assert attempts == 1


@pytest.mark.usefixtures("no_openai_key")
async def test_a_base_url_that_is_not_a_url_fails_the_step_at_once(database_url: str) -> None:
    error, attempts = await _fail_fast(
        database_url, "openai:gpt-4o-mini", openai_api_key="sk-test", openai_base_url="localhost:11434/v1"
    )
    assert error["code"] == "model_config_invalid"
    assert "AGENTFLOW_OPENAI_BASE_URL" in str(error["message"])
    assert attempts == 1
