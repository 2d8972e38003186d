"""``/api/events``: publish one event or a batch into the event log."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Body, Response
from pydantic import BaseModel, Field

from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES
from agentflow.core.errors import ConfigError, NotFoundError

router = APIRouter(prefix="/api/events", tags=["events"], responses={**ERROR_RESPONSES})


class PublishedEvent(BaseModel):
    """One stored event, new or (for a repeated topic and message_id) the original."""

    topic: str
    message_id: str
    seq: int = Field(description="The event's number in the log.")
    account_id: str | None
    published_at: datetime
    received_at: datetime
    created: bool = Field(description="False when this (topic, message_id) had been published before.")


class PublishResult(BaseModel):
    """The events in the order they were sent."""

    events: list[PublishedEvent]
    created: int = Field(description="How many of them are new.")


EXAMPLE = {
    "topic": "email.received",
    "message_id": "msg-123",
    "data": {"account_id": "acme", "subject": "Pricing"},
}


@router.post(
    "",
    response_model=PublishResult,
    status_code=201,
    summary="Publish events",
    responses={200: {"model": PublishResult, "description": "Every event had been published before"}},
)
async def publish_events(
    response: Response,
    engine: EngineDep,
    workspace: WorkspaceDep,
    body: Annotated[
        dict[str, Any],
        Body(
            description='One event, or `{"events": [...]}` with up to 1,000.',
            examples=[EXAMPLE, {"events": [EXAMPLE]}],
        ),
    ],
) -> PublishResult:
    """Store events in one commit. Re-publishing a (topic, message_id) returns the original (G1)."""
    items = body.get("events") if "events" in body else [body]
    if not isinstance(items, list) or not items:
        raise ConfigError(
            "event_invalid",
            "'events' must be a non-empty list of events",
            details={"errors": [{"path": "events", "message": "expected a non-empty list"}]},
        )
    if not all(isinstance(item, dict) for item in items):
        raise ConfigError("event_invalid", "every event must be a JSON object")
    try:
        published = await engine.events.publish(items, workspace_id=workspace)
    except asyncpg.ForeignKeyViolationError:
        raise NotFoundError(
            "workspace_not_found", f"workspace {workspace} does not exist", solution="Check the workspace id."
        ) from None
    created = sum(p.created for p in published)
    if not created:
        response.status_code = 200
    return PublishResult(
        events=[
            PublishedEvent(
                topic=p.event.topic,
                message_id=p.event.message_id,
                seq=p.event.seq,
                account_id=p.event.account_id,
                published_at=p.event.published_at,
                received_at=p.event.received_at,
                created=p.created,
            )
            for p in published
        ],
        created=created,
    )
