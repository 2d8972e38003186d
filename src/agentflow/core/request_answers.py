"""Whether an answer fits what a request asked (pure): a form's JSON Schema, a selection's
options, a yes or no for approvals and reviews, an agent call's edited arguments.

Every answer goes through these checks, whichever channel it came by (the API, an emailed
link, a Slack button, a free-text reply the model read).
"""

from __future__ import annotations

from typing import Any

import jsonschema

from agentflow.core.errors import ConfigError


def checked_answer(request: dict[str, Any], approved: bool | None, response: Any) -> tuple[str, str, Any]:
    """(status, outcome, response) of a valid answer to a node's request.

    Raises:
        ConfigError: ``response_invalid``, naming what does not fit.
    """
    kind, spec = request["kind"], request["spec"] or {}
    if kind in ("approval", "review"):
        if approved is None:
            article = "an" if kind == "approval" else "a"
            raise response_invalid(f"{article} {kind} needs 'approved': true or false")
        if not approved:
            return "rejected", "rejected", None
        if kind == "review":
            edited = response is not None
            return "approved", "approved", response if edited else spec.get("proposed")
        return "approved", "approved", None
    if kind == "callback":
        return "answered", "answered", response
    if kind == "input":
        problems = [
            f"{'.'.join(str(p) for p in e.absolute_path) or '(response)'}: {e.message[:200]}"
            for e in jsonschema.Draft202012Validator(spec.get("form", {})).iter_errors(response)
        ]
        if problems:
            raise response_invalid(
                "the response does not match the form: " + "; ".join(problems[:5]), problems
            )
        return "answered", "answered", response
    values = [o["value"] for o in spec.get("options", [])]
    if not any(response == v and type(response) is type(v) for v in values):
        raise response_invalid(f"the response must be one of {values}")
    return "answered", "answered", response


def edited_call(request: dict[str, Any], response: Any) -> dict[str, Any] | None:
    """The arguments an approver changed an agent's call to (None: approved as asked).

    Raises:
        ConfigError: ``response_invalid``: edits are off, or not a JSON object.
    """
    if response is None:
        return None
    if not (request["spec"] or {}).get("allow_edits", True):
        raise response_invalid("this workflow does not let approvers edit the call (approval.allow_edits)")
    if not isinstance(response, dict):
        raise response_invalid("an edited call is a JSON object of the tool's arguments")
    return response


def response_invalid(message: str, problems: list[str] | None = None) -> ConfigError:
    """The ``response_invalid`` error (422)."""
    return ConfigError(
        "response_invalid",
        message,
        details={"problems": problems} if problems else None,
        solution="Answer what the request asks (GET /api/requests/{id} shows it).",
    )
