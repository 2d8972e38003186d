"""Embedders: what turns text into vectors for the optional semantic search.

An embedder is any object with an ``embed`` coroutine: a vendor's (OpenAI, Gemini), one over
an OpenAI-compatible endpoint, or the local all-MiniLM-L6-v2 that ``AGENTFLOW_EMBEDDINGS=local``
selects (``configured_embedder``; the ``local-embeddings`` extra). Its vectors are checked
before they reach the database.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from agentflow.core.errors import ConfigError
from agentflow.llm import local_embedder
from agentflow.settings import Settings

MAX_DIMENSIONS = 16_000
"""The most dimensions pgvector stores in a ``vector``."""
BATCH = 64
"""How many texts one ``embed`` call gets at most."""


class Embedder(Protocol):
    """Turns texts into vectors; similar meanings should give a high cosine similarity."""

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order, all of the same dimension."""
        ...


def configured_embedder(settings: Settings) -> Embedder | None:
    """The knowledge base's own embedder as ``settings.embeddings`` says.

    ``local``: the local all-MiniLM-L6-v2 (loaded on first use); ``provider``: None (only the
    embedder a caller passes, such as the workflow's model provider, ranks by meaning).

    Raises:
        ConfigError: ``local_embeddings_unavailable`` when ``local`` is asked for and the
            ``local-embeddings`` extra is not installed.
    """
    if settings.embeddings != "local":
        return None
    local_embedder.require_installed()
    return local_embedder.LocalEmbedder()


def check_vectors(vectors: object, count: int, dimensions: int | None = None) -> list[list[float]]:
    """The embedder's answer, checked: ``count`` finite vectors of one dimension.

    Args:
        vectors: what ``embed`` returned.
        count: how many texts it was given.
        dimensions: the dimension they must have (None: any, the same for all).

    Raises:
        ConfigError: ``embedder_invalid``.
    """
    if not isinstance(vectors, Sequence) or len(vectors) != count:
        raise _invalid(f"the embedder must return {count} vector(s), one per text")
    checked: list[list[float]] = []
    for vector in vectors:
        if not isinstance(vector, Sequence) or not 1 <= len(vector) <= MAX_DIMENSIONS:
            raise _invalid(f"a vector must have 1 to {MAX_DIMENSIONS} numbers")
        values = [
            float(x) if isinstance(x, int | float) and not isinstance(x, bool) else math.nan for x in vector
        ]
        if not all(math.isfinite(x) for x in values):
            raise _invalid("a vector must hold finite numbers only")
        dimensions = dimensions or len(values)
        if len(values) != dimensions:
            raise _invalid(f"every vector must have {dimensions} dimensions")
        checked.append(values)
    return checked


def _invalid(message: str) -> ConfigError:
    return ConfigError(
        "embedder_invalid",
        message,
        solution="Check the embedder passed to the knowledge base (its model and its output).",
    )
