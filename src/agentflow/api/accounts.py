"""``/api/accounts/{account_id}/events``: what changed for an account, from every source."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel

from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES
from agentflow.core.errors import ConfigError
from agentflow.core.sources import SOURCE_PATTERN, source_of

router = APIRouter(prefix="/api/accounts", tags=["events"], responses={**ERROR_RESPONSES})


class AccountEvent(BaseModel):
    """One event about the account."""

    topic: str
    source: str
    message_id: str
    data: dict[str, Any]
    published_at: datetime
    received_at: datetime


class AccountEvents(BaseModel):
    """Newest first."""

    account_id: str
    events: list[AccountEvent]


@router.get("/{account_id}/events", response_model=AccountEvents, summary="What changed for an account")
async def account_events(
    account_id: str,
    engine: EngineDep,
    workspace: WorkspaceDep,
    hours: Annotated[float, Query(gt=0, le=24 * 365, description="How far back to look.")] = 2.0,
    source: Annotated[
        list[str] | None, Query(max_length=20, description="Only these sources (email, ticket, ...).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> AccountEvents:
    """Events of every source about the account in the last ``hours`` (one indexed query)."""
    if not 1 <= len(account_id) <= 200:
        raise ConfigError("account_invalid", "an account id has 1 to 200 characters")
    for name in source or []:
        if not re.fullmatch(SOURCE_PATTERN, name):
            raise ConfigError(
                "source_invalid", f"{name[:60]!r} is not a source name (lowercase letters, digits, _)"
            )
    found = await engine.events.for_account(
        account_id, since_seconds=hours * 3600, sources=source, limit=limit, workspace_id=workspace
    )
    return AccountEvents(
        account_id=account_id,
        events=[
            AccountEvent(
                topic=e.topic,
                source=source_of(e.topic),
                message_id=e.message_id,
                data=e.data,
                published_at=e.published_at,
                received_at=e.received_at,
            )
            for e in found
        ],
    )
