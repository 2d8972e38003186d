"""``/api/accounts``: what the agent knows about each account (set it, read it, list them),
and ``/api/accounts/{account_id}/events``: what changed for an account, from every source."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, ConfigDict, Field

from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES
from agentflow.core.accounts import MAX_LIST
from agentflow.core.errors import ConfigError
from agentflow.core.sources import SOURCE_PATTERN, source_of

router = APIRouter(prefix="/api/accounts", tags=["events"], responses={**ERROR_RESPONSES})

_FIELDS = ("name", "owner", "attributes")


class Account(BaseModel):
    """An account: what a run's context tells the model about the customer."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    workspace_id: UUID
    name: str | None
    owner: str | None = Field(description="Who looks after it: an email address or a person's name.")
    attributes: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class AccountList(BaseModel):
    """Accounts by id; pass ``next_after`` as ``after`` for the next page."""

    accounts: list[Account]
    next_after: str | None


_CHANGE_SCHEMA: dict[str, Any] = {
    "properties": {
        "name": {"type": ["string", "null"], "maxLength": 200},
        "owner": {"type": ["string", "null"], "maxLength": 320},
        "attributes": {"type": ["object", "null"], "additionalProperties": True},
    },
    "additionalProperties": False,
}
"""What the body may hold (validated by the engine, whose 422 ``account_invalid`` names each field)."""

_UPSERT_EXAMPLE = {"name": "Acme", "owner": "dana@example.com", "attributes": {"plan": "enterprise"}}


@router.get("", response_model=AccountList, summary="List accounts", tags=["accounts"])
async def list_accounts(
    engine: EngineDep,
    workspace: WorkspaceDep,
    owner: Annotated[
        str | None, Query(min_length=1, max_length=320, description="Only this owner's.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 100,
    after: Annotated[
        str | None, Query(min_length=1, max_length=200, description="The previous page's `next_after`.")
    ] = None,
) -> AccountList:
    """Accounts by id, one page at a time."""
    found = await engine.accounts.list(owner=owner, limit=limit, after=after, workspace_id=workspace)
    next_after = found[-1].id if len(found) == limit else None
    return AccountList(accounts=[Account.model_validate(a) for a in found], next_after=next_after)


@router.get("/{account_id}", response_model=Account, summary="Get an account", tags=["accounts"])
async def get_account(account_id: str, engine: EngineDep, workspace: WorkspaceDep) -> Account:
    """An account by id; 404 ``account_not_found`` for an unknown id or another workspace's."""
    return Account.model_validate(await engine.accounts.get(account_id, workspace_id=workspace))


@router.put("/{account_id}", response_model=Account, summary="Create or update an account", tags=["accounts"])
async def put_account(
    account_id: str,
    engine: EngineDep,
    workspace: WorkspaceDep,
    change: Annotated[
        dict[str, Any],
        Body(
            description="Any of `name`, `owner` (an email address or a name) and `attributes` (a JSON"
            " object of at most 64 KiB, merged into the stored attributes; an attribute set to null is"
            " removed). Fields not given (or null) are kept. 422 `account_invalid` lists each offending"
            " field.",
            examples=[_UPSERT_EXAMPLE],
            json_schema_extra=_CHANGE_SCHEMA,
        ),
    ],
) -> Account:
    """Create the account, or merge the change into it (one statement)."""
    unknown = sorted(set(change) - set(_FIELDS))
    if unknown:
        raise ConfigError(
            "account_invalid",
            f"unknown field(s) {unknown}; an account change has {', '.join(_FIELDS)}",
            details={"errors": [{"path": name, "message": "unknown field"} for name in unknown]},
        )
    record = await engine.accounts.upsert(
        account_id,
        name=change.get("name"),
        owner=change.get("owner"),
        attributes=change.get("attributes"),
        workspace_id=workspace,
    )
    return Account.model_validate(record)


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
