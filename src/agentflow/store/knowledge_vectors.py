"""Named queries for the knowledge base's optional embeddings (pgvector).

Migration 0008 adds ``knowledge_chunks.embedding`` (a ``vector`` of any dimension) only where
pgvector is available, so every caller asks ``available`` first. Vectors travel as text
(``[0.1,0.2]``) cast to ``vector`` in SQL: asyncpg has no codec for the extension's type, and
the queries never read a vector back. Searches compare only vectors of the query's dimension:
chunks embedded by another embedder (another dimension) are re-embedded, not mixed up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from uuid import UUID

import asyncpg

from agentflow.core.frozen import frozen
from agentflow.store.knowledge import ChunkHit


@frozen
class ChunkText:
    """A chunk still to embed, with the title of its document."""

    document_id: UUID
    n: int
    title: str
    heading: str | None
    body: str


async def available(pool: asyncpg.Pool) -> bool:
    """Whether this database has ``knowledge_chunks.embedding`` (pgvector was available)."""
    found: bool = await pool.fetchval(
        "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('knowledge_chunks')"
        " AND attname = 'embedding' AND NOT attisdropped)"
    )
    return found


async def missing(pool: asyncpg.Pool, workspace_id: UUID, dimensions: int, limit: int) -> list[ChunkText]:
    """Up to ``limit`` chunks without an embedding of ``dimensions`` dimensions."""
    rows = await pool.fetch(
        "SELECT c.document_id, c.n, d.title, c.heading, c.body FROM knowledge_chunks c"
        " JOIN knowledge_documents d ON d.workspace_id = c.workspace_id AND d.id = c.document_id"
        " WHERE c.workspace_id = $1 AND (c.embedding IS NULL OR vector_dims(c.embedding) <> $2)"
        " ORDER BY c.document_id, c.n LIMIT $3",
        workspace_id,
        dimensions,
        limit,
    )
    return [ChunkText(r["document_id"], r["n"], r["title"], r["heading"], r["body"]) for r in rows]


async def store(
    pool: asyncpg.Pool, workspace_id: UUID, embeddings: Sequence[tuple[UUID, int, Sequence[float]]]
) -> None:
    """Set the embedding of each ``(document_id, n)`` chunk (a chunk replaced since is skipped)."""
    await pool.executemany(
        "UPDATE knowledge_chunks SET embedding = $4::text::vector"
        " WHERE workspace_id = $1 AND document_id = $2 AND n = $3",
        [(workspace_id, doc_id, n, vector_text(vector)) for doc_id, n, vector in embeddings],
    )


async def search(
    pool: asyncpg.Pool, workspace_id: UUID, vector: Sequence[float], limit: int
) -> list[ChunkHit]:
    """The ``limit`` chunks nearest to ``vector`` by cosine distance; score = cosine similarity.

    Chunks whose similarity is undefined (a zero vector) are left out.
    """
    rows = await pool.fetch(
        "SELECT c.document_id, c.n, d.title, d.source, c.heading, c.body,"
        " 1 - (c.embedding <=> $2::text::vector) AS score"
        " FROM knowledge_chunks c"
        " JOIN knowledge_documents d ON d.workspace_id = c.workspace_id AND d.id = c.document_id"
        " WHERE c.workspace_id = $1 AND c.embedding IS NOT NULL AND vector_dims(c.embedding) = $3"
        " ORDER BY c.embedding <=> $2::text::vector, d.title, c.n LIMIT $4",
        workspace_id,
        vector_text(vector),
        len(vector),
        limit,
    )
    hits = [ChunkHit.from_row(r) for r in rows]
    return [hit for hit in hits if not math.isnan(hit.score)]


def vector_text(vector: Sequence[float]) -> str:
    """pgvector's text form of ``vector``: ``[0.25,-1,3e-05]``."""
    return "[" + ",".join(format(float(x), ".9g") for x in vector) + "]"
