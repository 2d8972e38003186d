"""Requests to people (issue 14): ``/api/requests`` lists what waits for a person (a graph's
``user_input`` nodes and agents' tool approvals), shows one, and takes an answer. The first
valid answer resumes the run; a later one is 409 ``request_already_answered`` naming who
answered first; an answer that does not fit what was asked is 422 ``response_invalid``.

``/api/public/callbacks/{id}`` is how an outside system answers a ``wait_callback`` node's
request (issue 13), and ``/api/public/requests/{id}`` how a person answers through an emailed
link (issue 14): no API key, the link's single-use token instead.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Header, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from agentflow.api import strict_json
from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.openapi import NO_NUL
from agentflow.api.schemas import ERROR_RESPONSES, conflict
from agentflow.core.errors import AuthError, NotFoundError

router = APIRouter(tags=["requests"], responses={**ERROR_RESPONSES})
CALLBACK_TOKEN_HEADER = "X-Agentflow-Callback-Token"


class HumanRequest(BaseModel):
    """What a run waits for a person to answer."""

    id: UUID
    run_id: UUID
    workflow_id: UUID
    step_seq: int = Field(description="The step that asked.")
    kind: str = Field(
        examples=["approval"], description="approval, input, selection, review, or callback (wait_callback)."
    )
    node_id: str | None = Field(description="The user_input node; null for an agent's tool approval.")
    tool: str | None = Field(description="The tool an agent wants to call (approvals of agents).")
    message: str | None
    spec: dict[str, Any] | None = Field(
        description="The form (JSON Schema), the options, or the proposed value."
    )
    arguments: dict[str, Any]
    arguments_hash: str
    assignees: list[str] = Field(description="Who may answer; empty: anyone.")
    channels: list[str]
    timeout_action: str | None
    status: str = Field(examples=["pending"], description="pending, approved, rejected, answered, expired.")
    response: Any
    reason: str | None
    responded_by: str | None
    responded_via: str | None
    created_at: datetime
    expires_at: datetime | None
    responded_at: datetime | None
    expired: bool


class Answer(BaseModel):
    """A person's answer."""

    model_config = ConfigDict(extra="forbid")

    approved: bool | None = Field(default=None, description="Approvals and reviews: yes or no.")
    response: Any = Field(
        default=None, description="An input's form, a selection's value, or a review's edited value."
    )
    reason: str | None = Field(default=None, max_length=2000, pattern=NO_NUL)
    responded_by: str | None = Field(default=None, max_length=200, pattern=NO_NUL)


def _request_id(value: str) -> UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFoundError("request_not_found", f"no request {value[:80]!r} in this workspace") from None


@router.get("/api/requests", response_model=list[HumanRequest], summary="List requests to people")
async def list_requests(
    engine: EngineDep,
    workspace: WorkspaceDep,
    status: Annotated[
        Literal["pending", "approved", "rejected", "answered", "expired", "all"],
        Query(description="pending (default), approved, rejected, answered, expired, all"),
    ] = "pending",
    assignee: Annotated[
        str | None, Query(max_length=200, description="Those this person may answer.")
    ] = None,
    workflow_id: UUID | None = None,
    run_id: UUID | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[HumanRequest]:
    """Requests, newest first."""
    found = await engine.requests.list(
        status=None if status == "all" else status, assignee=assignee, workflow_id=workflow_id,
        run_id=run_id, limit=limit, workspace_id=workspace,
    )  # fmt: skip
    return [HumanRequest.model_validate(r) for r in found]


@router.get("/api/requests/{request_id}", response_model=HumanRequest, summary="Get a request")
async def get_request(request_id: str, engine: EngineDep, workspace: WorkspaceDep) -> HumanRequest:
    """One request; 404 ``request_not_found`` for an unknown, malformed or foreign id."""
    return HumanRequest.model_validate(
        await engine.requests.get(_request_id(request_id), workspace_id=workspace)
    )


@router.post(
    "/api/requests/{request_id}/respond",
    response_model=HumanRequest,
    summary="Answer a request",
    responses=conflict("`request_already_answered`, `request_expired`"),
)
async def respond(request_id: str, body: Answer, engine: EngineDep, workspace: WorkspaceDep) -> HumanRequest:
    """Answer; the run goes on with it. 409 when already answered or timed out; 422
    ``response_invalid`` when the answer does not fit the request."""
    answered = await engine.requests.respond(
        _request_id(request_id), approved=body.approved, response=body.response, reason=body.reason,
        responded_by=body.responded_by, via="in_app", workspace_id=workspace,
    )  # fmt: skip
    return HumanRequest.model_validate(answered)


class CallbackAnswer(BaseModel):
    """What a call to a callback URL did."""

    request_id: UUID
    run_id: UUID
    status: str = Field(examples=["answered"], description="answered: the run goes on with the body.")


@router.post(
    "/api/public/callbacks/{request_id}",
    response_model=CallbackAnswer,
    summary="Call a waiting run back (wait_callback)",
    responses=conflict("`request_already_answered`, `request_expired`"),
)
async def call_back(
    request_id: str,
    request: Request,
    engine: EngineDep,
    token: Annotated[str | None, Query(max_length=200, description="The token of the callback URL.")] = None,
    header_token: Annotated[str | None, Header(alias=CALLBACK_TOKEN_HEADER, max_length=200)] = None,
) -> CallbackAnswer:
    """The JSON body (empty: null) becomes the ``wait_callback`` node's output; the run goes on.
    No API key: the URL's token is the credential (or send it in ``X-Agentflow-Callback-Token``).
    404 ``callback_not_found`` for an unknown id or a wrong token; 409 after the first call or
    the timeout."""
    body = await request.body()
    found = _callback_id(request_id)
    answered = await engine.requests.call_back(
        found, token or header_token or "", strict_json.parse(body) if body.strip() else None
    )
    return CallbackAnswer(request_id=answered["id"], run_id=answered["run_id"], status=answered["status"])


def _callback_id(value: str) -> UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFoundError("callback_not_found", "no callback with this id and token") from None


REQUEST_TOKEN_HEADER = "X-Agentflow-Request-Token"


class LinkedRequest(BaseModel):
    """A request as the person its link was emailed to sees it."""

    id: UUID
    kind: str
    message: str | None
    spec: dict[str, Any] | None = Field(
        description="The form (JSON Schema), the options, or the proposed value."
    )
    status: str
    expires_at: datetime | None
    responded_by: str | None
    responded_at: datetime | None
    given_to: str = Field(description="Whom the link was emailed to: the answer is recorded as theirs.")


class LinkAnswer(BaseModel):
    """An answer through an emailed link (who answers is the person it was emailed to)."""

    model_config = ConfigDict(extra="forbid")

    approved: bool | None = Field(default=None, description="Approvals and reviews: yes or no.")
    response: Any = Field(
        default=None, description="An input's form, a selection's value, or a review's edit."
    )
    reason: str | None = Field(default=None, max_length=2000, pattern=NO_NUL)


def _linked(request: dict[str, Any], given_to: str) -> LinkedRequest:
    return LinkedRequest.model_validate({**request, "given_to": given_to})


@router.get(
    "/api/public/requests/{request_id}",
    response_model=LinkedRequest,
    summary="Read a request through its emailed link",
)
async def read_by_link(
    request_id: str,
    engine: EngineDep,
    token: Annotated[str | None, Header(alias=REQUEST_TOKEN_HEADER, max_length=200)] = None,
) -> LinkedRequest:
    """The request an emailed link answers; no API key: the link's token (sent in
    ``X-Agentflow-Request-Token``) is the credential. 401 ``link_invalid`` for a forged link or
    another request's, ``link_expired`` once the request timed out."""
    request, given_to, _via = await engine.requests.by_link(_link_id(request_id), token or "")
    return _linked(request, given_to)


@router.post(
    "/api/public/requests/{request_id}/respond",
    response_model=LinkedRequest,
    summary="Answer a request through its emailed link",
    responses=conflict("`request_already_answered`"),
)
async def respond_by_link(
    request_id: str,
    body: LinkAnswer,
    engine: EngineDep,
    token: Annotated[str | None, Header(alias=REQUEST_TOKEN_HEADER, max_length=200)] = None,
) -> LinkedRequest:
    """Answer as the person the link was emailed to; the run goes on. 401 for a forged or
    expired link, 409 when the request was answered already (by anyone, through any channel),
    422 ``response_invalid`` when the answer does not fit."""
    answered = await engine.requests.respond_by_link(
        _link_id(request_id), token or "", approved=body.approved, response=body.response, reason=body.reason
    )
    return _linked(answered, str(answered["responded_by"]))


def _link_id(value: str) -> UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise AuthError("link_invalid", "this link does not answer any request") from None
