"""``/api/keys``: create, list and revoke the workspace's access keys."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from agentflow.api.audit_trail import note
from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES
from agentflow.core.access_keys import NAME_PATTERN
from agentflow.core.roles import Role

router = APIRouter(prefix="/api/keys", tags=["keys"], responses={**ERROR_RESPONSES})


class KeyIn(BaseModel):
    """A key to create."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["api", "trigger"] = Field(
        description="`api`: authenticates the API (Bearer); `trigger`: public trigger URLs."
    )
    name: str = Field(min_length=1, max_length=100, pattern=NAME_PATTERN, examples=["zendesk webhook"])
    role: Role = Field(
        default="admin",
        description="For API keys: `admin` (everything), `operator` (run things; no keys, credentials,"
        " people, budgets), `viewer` (read only).",
    )


class Key(BaseModel):
    """A key, without its secret."""

    id: str
    kind: str
    name: str
    role: str = Field(examples=["operator"])
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class CreatedKey(Key):
    """A new key: ``key`` is shown this once and never stored."""

    key: str = Field(description="The token to send (afk_... or aft_...).")


class KeyList(BaseModel):
    """The workspace's keys, newest first."""

    keys: list[Key]


@router.post("", response_model=CreatedKey, status_code=201, summary="Create a key")
async def create_key(body: KeyIn, request: Request, engine: EngineDep, workspace: WorkspaceDep) -> CreatedKey:
    """Create a key; its token is in this answer only."""
    record, token = await engine.keys.create(body.kind, body.name, role=body.role, workspace_id=workspace)
    note(request, key_id=record["id"], name=body.name, role=body.role)
    return CreatedKey(**record, key=token)


@router.get("", response_model=KeyList, summary="List keys")
async def list_keys(engine: EngineDep, workspace: WorkspaceDep) -> KeyList:
    """Every key of the workspace (revoked ones included, marked)."""
    return KeyList(keys=[Key(**row) for row in await engine.keys.list(workspace_id=workspace)])


@router.delete("/{key_id}", response_model=Key, summary="Revoke a key")
async def revoke_key(key_id: str, engine: EngineDep, workspace: WorkspaceDep) -> Key:
    """Revoke a key at once (idempotent)."""
    return Key(**await engine.keys.revoke(key_id, workspace_id=workspace))
