"""``/api/memory``: what agents remember per key (issue 12): read a key's summary and messages,
or forget it. Keys are rendered templates and may hold any character, so they travel as query
parameters."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES
from agentflow.core.agent_memory import MAX_KEY_CHARS, NAMESPACE_PATTERN
from agentflow.memories import MAX_PAGE

router = APIRouter(prefix="/api/memory", tags=["agents"], responses={**ERROR_RESPONSES})

Namespace = Annotated[
    str,
    Query(pattern=NAMESPACE_PATTERN, description="The memory's namespace (by default its workflow's name)."),
]
Key = Annotated[str, Query(min_length=1, max_length=MAX_KEY_CHARS, description="The rendered memory key.")]


class MemoryMessage(BaseModel):
    """One remembered message."""

    seq: int
    run_id: str
    step: int
    role: str = Field(examples=["assistant"])
    content: str
    created_at: str
    expires_at: str


class MemorySummary(BaseModel):
    """The summary of messages up to ``through_seq``."""

    text: str
    through_seq: int


class MemoryPage(BaseModel):
    """A key's memory, newest messages first."""

    namespace: str
    key: str
    messages_total: int
    bytes: int = Field(description="The stored size of its messages' text.")
    first_at: str | None
    last_at: str | None
    summary: MemorySummary | None
    messages: list[MemoryMessage]
    next_before: int | None = Field(description="Pass as `before` for the next (older) page.")


class Forgotten(BaseModel):
    """What was deleted."""

    deleted_messages: int


@router.get("", response_model=MemoryPage, summary="Read an agent memory")
async def read_memory(
    engine: EngineDep,
    workspace: WorkspaceDep,
    namespace: Namespace,
    key: Key,
    before: Annotated[
        int | None, Query(ge=1, le=2**62, description="Only messages older than this seq.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
) -> dict[str, Any]:
    """Totals, the summary and messages newest first; 404 ``memory_not_found``."""
    return await engine.memory.read(namespace, key, before=before, limit=limit, workspace_id=workspace)


@router.delete("", response_model=Forgotten, summary="Forget an agent memory")
async def forget_memory(
    engine: EngineDep, workspace: WorkspaceDep, namespace: Namespace, key: Key
) -> Forgotten:
    """Delete everything remembered under the key (idempotent: 0 when nothing was)."""
    return Forgotten(deleted_messages=await engine.memory.forget(namespace, key, workspace_id=workspace))
