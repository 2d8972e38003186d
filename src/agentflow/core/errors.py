"""Structured errors shared by every layer.

A structured error carries a stable ``code`` that programs can match on, a
``message`` for people, optional ``details`` and a ``solution`` that says what to
do about it (seed 001: fail fast with clear feedback).
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from agentflow.core.frozen import frozen


@frozen
class ErrorInfo:
    """The structured form of an error, as stored on steps and runs and sent by the API."""

    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    solution: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the JSON object stored in ``runs.error`` and ``run_steps.error``."""
        data: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            data["details"] = self.details
        if self.solution:
            data["solution"] = self.solution
        return data


class AgentflowError(Exception):
    """Base of every error agentflow raises on purpose.

    Attributes:
        info: the structured error.
    """

    status_code = 400

    def __init__(
        self,
        code: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        solution: str | None = None,
    ) -> None:
        super().__init__(message)
        self.info = ErrorInfo(code, message, details or {}, solution)

    @property
    def code(self) -> str:
        """The stable error code."""
        return self.info.code


class ConfigError(AgentflowError):
    """A workflow config failed validation; ``details['errors']`` lists each offending path."""

    status_code = 422


class NotFoundError(AgentflowError):
    """A referenced object does not exist (in this workspace)."""

    status_code = 404


class ConflictError(AgentflowError):
    """The request conflicts with the current state of the object."""

    status_code = 409


class AuthError(AgentflowError):
    """The request carries no valid credentials (a key, a signature)."""

    status_code = 401


class ForbiddenError(AgentflowError):
    """The credentials are valid but do not allow this request."""

    status_code = 403


class StepFailure(Exception):
    """Raise from a tool to fail the current attempt with a structured error.

    Args:
        code: stable error code, for example ``"upstream_unavailable"``.
        message: what went wrong, for people.
        retryable: when False the run fails at once instead of retrying.
        details: extra JSON-serialisable facts.
        solution: what a person can do about it.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool = True,
        details: dict[str, Any] | None = None,
        solution: str | None = None,
    ) -> None:
        super().__init__(message)
        self.info = ErrorInfo(code, message, details or {}, solution)
        self.retryable = retryable
