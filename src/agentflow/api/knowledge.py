"""``/api/knowledge``: the playbooks behind the agent tool ``generate_plan``.

List the workspace's documents (the bundled playbooks and its own), add or replace one,
search passages for a scenario, and compose the plan ``generate_plan`` would return.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from agentflow.api.audit_trail import note
from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES, conflict
from agentflow.knowledge.documents import MAX_LIMIT

router = APIRouter(prefix="/api/knowledge", tags=["knowledge"], responses={**ERROR_RESPONSES})


class Document(BaseModel):
    """A knowledge document, without its body."""

    model_config = ConfigDict(from_attributes=True)

    id: UUID
    workspace_id: UUID
    title: str
    source: str = Field(description="`builtin` (shipped with agentflow) or `operator`.", examples=["builtin"])
    tags: list[str] = Field(examples=[["churn", "at risk", "get well"]])
    content_hash: str
    chunks: int = Field(description="How many passages it was cut into (one per section).")
    created_at: datetime
    updated_at: datetime


class DocumentList(BaseModel):
    """The workspace's documents: bundled playbooks first, then by title."""

    documents: list[Document]


class DocumentIn(BaseModel):
    """A document to add; one with the same title is replaced."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(description="One line, at most 200 characters.", examples=["Churn save desk"])
    body: str = Field(
        description="Markdown or text, at most 200,000 characters, cut into passages at its headings."
        " A YAML front matter's `tags` and `scenarios` become tags.",
        examples=["## Steps\n\n1. Call the sponsor. (owner: CSM; due: within 1 business day)"],
    )
    tags: list[str] = Field(default=[], description="Scenario words and phrases it is for.")


class Passage(BaseModel):
    """A section of a document that matches the scenario."""

    document_id: UUID
    title: str
    heading: str | None
    text: str
    score: float = Field(description="Higher is better; comparable within one search only.")
    source: str


class SearchResult(BaseModel):
    """Passages, best first."""

    scenario: str
    passages: list[Passage]


class DocumentRef(BaseModel):
    """A document, by id and title."""

    document_id: UUID
    title: str


class Citation(DocumentRef):
    """A section a plan was composed from."""

    heading: str | None


class PlanStep(BaseModel):
    """One step: what to do, who does it and when it is due, as the playbook says."""

    n: int
    action: str
    owner: str | None = Field(examples=["CSM"])
    due_in: str | None = Field(examples=["within 2 business days"])


class PlanOut(BaseModel):
    """The plan ``generate_plan`` returns: the best playbook's steps, with citations."""

    scenario: str
    playbook: DocumentRef | None = Field(description="The document followed; null when nothing matched.")
    summary: str
    steps: list[PlanStep]
    signals: list[str]
    done_when: list[str]
    citations: list[Citation]
    related: list[DocumentRef] = Field(description="Other documents that matched well.")


_SCENARIO = "A few words, e.g. `get well plan`, `expansion`, `pricing` (at most 1,000 characters)."


@router.get("", response_model=DocumentList, summary="List knowledge documents")
async def list_documents(engine: EngineDep, workspace: WorkspaceDep) -> DocumentList:
    """Every document of the workspace (the bundled playbooks are loaded on first use)."""
    records = await engine.knowledge.list(workspace_id=workspace)
    return DocumentList(documents=[Document.model_validate(r) for r in records])


@router.post("", response_model=Document, status_code=201, summary="Add a knowledge document")
async def add_document(
    body: DocumentIn, request: Request, engine: EngineDep, workspace: WorkspaceDep
) -> Document:
    """Store a document (replacing the one with the same title; the same content writes
    nothing). 422 ``knowledge_invalid`` lists each offending field."""
    record = await engine.knowledge.add(body.title, body.body, tags=body.tags, workspace_id=workspace)
    note(request, document_id=record.id, title=body.title)
    return Document.model_validate(record)


@router.get("/search", response_model=SearchResult, summary="Search passages for a scenario")
async def search(
    engine: EngineDep,
    workspace: WorkspaceDep,
    q: Annotated[str, Query(description=_SCENARIO)],
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many passages.")] = 5,
) -> SearchResult:
    """The passages that best match the scenario, best first (422 ``knowledge_query_invalid``
    for an empty or oversized one)."""
    passages = await engine.knowledge.search(q, limit=limit, workspace_id=workspace)
    return SearchResult(scenario=q, passages=[Passage.model_validate(p.to_json()) for p in passages])


@router.get("/plan", response_model=PlanOut, summary="Compose a plan for a scenario")
async def plan(
    engine: EngineDep, workspace: WorkspaceDep, scenario: Annotated[str, Query(description=_SCENARIO)]
) -> PlanOut:
    """What ``generate_plan(scenario)`` returns: the best playbook's steps (action, owner, due
    offset), what to watch, when it is done, and the sections cited."""
    composed = await engine.knowledge.plan(scenario, workspace_id=workspace)
    return PlanOut.model_validate(composed.to_json())


@router.delete(
    "/{document_id}",
    response_model=Document,
    summary="Delete a knowledge document",
    responses=conflict("`knowledge_builtin` (a bundled playbook)"),
)
async def delete_document(document_id: str, engine: EngineDep, workspace: WorkspaceDep) -> Document:
    """Delete one of the workspace's own documents (404 ``knowledge_not_found``; 409
    ``knowledge_builtin`` for a bundled playbook, which a document of its title overrides)."""
    return Document.model_validate(await engine.knowledge.delete(document_id, workspace_id=workspace))
