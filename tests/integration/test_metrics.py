"""Step and model metrics on /metrics: durations by kind, status and (allow-listed) workflow,
tokens, calls and cost by model, counted once per checkpointed step."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.core.chat import Message, ModelRequest, ModelResponse
from agentflow.engine import Engine
from agentflow.llm.base import Embedder, ModelError
from agentflow.llm.scripted import ScriptedProvider
from agentflow.llm.streaming import StreamingProvider
from agentflow.runtime import metrics
from agentflow.runtime.model_timing import timed
from tests.conftest import make_settings
from tests.support.agents import running_worker, until


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def flow(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "structured",
        "nodes": [
            {
                "id": "ask",
                "type": "llm",
                "model": "scripted:metered",
                "prompt": "Say hi to {{ payload.who }}",
            },
            {"id": "echo", "type": "tool", "tool": "echo", "args": {"value": "{{ input.text }}"}},
        ],
    }


@pytest.fixture
async def watching(database_url: str) -> AsyncIterator[Engine]:
    eng = await Engine.connect(make_settings(database_url, metrics_workflows="watched"), migrate_schema=False)
    yield eng
    await eng.close()


async def test_steps_and_model_calls_are_measured_once_each(watching: Engine) -> None:
    engine = watching
    for name in ("watched", "unlisted"):
        await engine.publish_workflow(flow(name))
    steps = ("agentflow_step_duration_seconds_count", "agentflow_step_duration_seconds_sum")
    before = {
        (workflow, kind, name): sample(name, kind=kind, status="completed", workflow=workflow)
        for workflow in ("watched", "other")
        for kind in ("llm", "tool")
        for name in steps
    }
    tokens_before = {
        t: sample("agentflow_model_tokens_total", model="scripted:metered", type=t)
        for t in ("input", "output")
    }
    calls_before = sample("agentflow_model_calls_total", model="scripted:metered")
    timed_before = sample(
        "agentflow_model_call_duration_seconds_count", model="scripted:metered", outcome="ok"
    )
    cost_before = sample("agentflow_model_cost_usd_total", model="scripted:metered")
    model = ScriptedProvider.from_replies(["hi Ann", "hi Bob"])
    async with running_worker(engine, model=model):
        runs = [
            await engine.start_run(name, {"who": who})
            for name, who in (("watched", "Ann"), ("unlisted", "Bob"))
        ]
        for run in runs:
            assert (await until(engine, run.id, lambda r: r.status.is_terminal)).status == "completed"
    for workflow in ("watched", "other"):  # the unlisted workflow counts under "other"
        for kind in ("llm", "tool"):
            count = sample(steps[0], kind=kind, status="completed", workflow=workflow)
            assert count == before[(workflow, kind, steps[0])] + 1, (workflow, kind)
            assert (
                sample(steps[1], kind=kind, status="completed", workflow=workflow)
                >= before[(workflow, kind, steps[1])]
            )
    assert sample(steps[0], kind="llm", status="completed", workflow="unlisted") == 0
    recorded = await engine.db.pool.fetchrow(
        "SELECT sum(input_tokens) AS i, sum(output_tokens) AS o, sum(usd_cost) AS usd FROM run_steps"
        " WHERE model = 'scripted:metered' OR model = 'metered'"
    )
    assert recorded["i"] and recorded["o"]
    assert (
        sample("agentflow_model_tokens_total", model="scripted:metered", type="input")
        - tokens_before["input"]
        == recorded["i"]
    )
    assert (
        sample("agentflow_model_tokens_total", model="scripted:metered", type="output")
        - tokens_before["output"]
        == recorded["o"]
    )
    assert sample("agentflow_model_calls_total", model="scripted:metered") - calls_before == 2
    timed_after = sample(
        "agentflow_model_call_duration_seconds_count", model="scripted:metered", outcome="ok"
    )
    assert timed_after - timed_before == 2
    assert sample("agentflow_model_cost_usd_total", model="scripted:metered") - cost_before == pytest.approx(
        float(recorded["usd"])
    )


def test_labels_stay_bounded() -> None:
    listed = metrics.BoundedLabels(["a", "b"])
    assert [listed.of(v) for v in ("a", "b", "c")] == ["a", "b", "other"]
    anything = metrics.BoundedLabels(["*"], limit=2)
    assert [anything.of(v) for v in ("x", "y", "z", "x")] == ["x", "y", "other", "x"]
    assert [metrics.BoundedLabels([]).of(v) for v in ("a", "")] == ["other", "other"]


async def test_a_timed_provider_times_failures_and_keeps_what_the_provider_can_do() -> None:
    failing = ScriptedProvider.from_replies([], name="flaky")  # every request fails
    provider = timed(failing)
    assert timed(provider) is provider and provider.name == "flaky"
    before = sample("agentflow_model_call_duration_seconds_count", model="flaky:m1", outcome="error")
    request = ModelRequest(model="m1", messages=(Message("user", "hi"),))
    with pytest.raises(ModelError):
        await provider.request(request)
    assert (
        sample("agentflow_model_call_duration_seconds_count", model="flaky:m1", outcome="error") == before + 1
    )
    assert isinstance(provider, StreamingProvider) is isinstance(failing, StreamingProvider)
    assert isinstance(provider, Embedder) is isinstance(failing, Embedder)
    assert isinstance(timed(FakeEmbedder()), Embedder) and not isinstance(
        timed(FakeEmbedder()), StreamingProvider
    )


class FakeEmbedder:
    name = "vectors"

    async def request(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("not asked")

    async def embed(self, texts: list[str], model: str | None = None) -> list[list[float]]:
        return [[1.0] for _ in texts]
