"""Free-text replies to requests (issue 14): ``/api/public/inbound/email`` takes an emailed
reply as it arrived (raw RFC 5322, ``Content-Type: message/rfc822``) from the mail relay of
``AGENTFLOW_REPLY_TO``'s domain; the workflow's model then reads it (a worker does, within
moments) and a relevant reply answers its request. ``/api/requests/{id}/replies`` shows a
request's replies with what the model read in each, and ``/api/replies?outcome=held`` the ones
waiting for a person.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.requests import _request_id
from agentflow.api.schemas import ERROR_RESPONSES
from agentflow.request_replies import OUTCOMES

router = APIRouter(tags=["requests"], responses={**ERROR_RESPONSES})


class Reply(BaseModel):
    """A free-text reply to a request and what the model read in it."""

    id: UUID
    request_id: UUID
    via: str = Field(examples=["email"])
    sender: str = Field(description="Who sent it (the From address).")
    given_to: str = Field(description="Whom the reply address was given to.")
    text: str = Field(description="The sender's own words (quoted text removed).")
    received_at: datetime
    label: str | None = Field(description="relevant, filtered or uncertain; null until read.")
    score: float | None = Field(description="0 to 1: how surely it answers the request.")
    verdict: dict[str, Any] | None = Field(
        description="What the model read: approved, response, reason, model."
    )
    outcome: str | None = Field(
        description="answered (it answered the request), held (for a person), ignored, late (the request"
        " was answered first); null until read."
    )
    classified_at: datetime | None
    attempts: int


class ReceivedReply(Reply):
    """A reply as received."""

    new: bool = Field(description="False when this message (its Message-ID) was received before.")


@router.post(
    "/api/public/inbound/email",
    response_model=ReceivedReply,
    status_code=202,
    summary="Receive an emailed reply to a request",
    openapi_extra={
        "requestBody": {"required": True, "content": {"message/rfc822": {"schema": {"type": "string"}}}}
    },
)
async def receive_email(request: Request, engine: EngineDep) -> ReceivedReply:
    """Keep a reply sent to a request's reply address; the workflow's model reads it next.
    No API key: the token in the reply address is the credential. 401 ``reply_address_invalid``
    when it was sent to no request's reply address; 422 ``email_unreadable``; 415 for another
    Content-Type than ``message/rfc822``."""
    return ReceivedReply.model_validate(await engine.replies.receive_email(await request.body()))


@router.get(
    "/api/requests/{request_id}/replies", response_model=list[Reply], summary="List a request's replies"
)
async def request_replies(request_id: str, engine: EngineDep, workspace: WorkspaceDep) -> list[Reply]:
    """The free-text replies to one request, newest first, with what the model read in each."""
    request = await engine.requests.get(_request_id(request_id), workspace_id=workspace)
    found = await engine.replies.list(request_id=request["id"], workspace_id=workspace)
    return [Reply.model_validate(r) for r in found]


@router.get("/api/replies", response_model=list[Reply], summary="List replies")
async def list_replies(
    engine: EngineDep,
    workspace: WorkspaceDep,
    outcome: Annotated[
        Literal["answered", "held", "ignored", "late"] | None,
        Query(description="held: waiting for a person to read them."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[Reply]:
    """Free-text replies of the workspace, newest first."""
    assert outcome is None or outcome in OUTCOMES
    found = await engine.replies.list(outcome=outcome, limit=limit, workspace_id=workspace)
    return [Reply.model_validate(r) for r in found]
