"""The provider interface every model adapter implements, and the one error they all raise.

The agent loop holds a ``ModelProvider`` and never sees a vendor type: requests and responses
are ``agentflow.core.chat`` values, and every failure is a ``ModelError`` with a stable code.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from agentflow.core.chat import ModelRequest, ModelResponse
from agentflow.core.errors import ErrorInfo

# Failures that may pass if the same request is sent again later.
_RETRYABLE_CODES = frozenset({"model_rate_limited", "model_unavailable", "model_timeout", "model_bad_output"})


@runtime_checkable
class ModelProvider(Protocol):
    """A model behind one vendor's API.

    Attributes:
        name: the adapter's name (``openai``, ``anthropic``, ``gemini``, ``scripted``).
    """

    name: str

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Send one request and return the model's answer.

        Raises:
            ModelError: every failure, vendor errors included, with a stable code.
        """
        ...


@runtime_checkable
class Embedder(Protocol):
    """A provider that also turns texts into embedding vectors (OpenAI, Gemini)."""

    async def embed(self, texts: list[str], model: str | None = None) -> list[list[float]]:
        """One vector per text, in order; ``model`` None means the vendor's default embedding model.

        Raises:
            ModelError: every failure, with a stable code.
        """
        ...


class ModelError(Exception):
    """A model call failed.

    Codes: ``model_auth_missing``, ``model_auth_failed``, ``model_rate_limited``,
    ``model_unavailable``, ``model_timeout``, ``model_bad_request``, ``model_bad_output``,
    ``model_unknown``.

    Args:
        code: the stable code programs match on.
        message: what happened and what to set or fix, for people.
        retryable: whether the same request may succeed later (default: by ``code``).
        details: JSON-serialisable facts (provider, HTTP status, vendor error, ...).
        retry_after: seconds the vendor asked us to wait before trying again, when it said.

    Attributes:
        code, message, retryable, details, retry_after: as given.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool | None = None,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = code in _RETRYABLE_CODES if retryable is None else retryable
        self.details: dict[str, Any] = dict(details or {})
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    @property
    def info(self) -> ErrorInfo:
        """The structured form stored on a failed step."""
        details = {**self.details, "retryable": self.retryable}
        if self.retry_after is not None:
            details["retry_after"] = self.retry_after
        return ErrorInfo(self.code, self.message, details)
