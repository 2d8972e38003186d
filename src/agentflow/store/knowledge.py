"""Named queries for the knowledge base: documents, their chunks, and searching them.

A document is written with its chunks in one transaction (the chunks are replaced whole), so
a search never sees a document half old and half new. Full-text search ranks chunks by how
well they match (``ts_rank`` over any of the scenario's words, a bonus when all of them
match), by the document's tags that occur as phrases in the scenario, and by the scenario's
words in the document's title. Vector search (by cosine distance) works where migration 0008
found pgvector and added ``knowledge_chunks.embedding``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.errors import NotFoundError
from agentflow.core.frozen import frozen

SOURCES = ("builtin", "operator")
"""Where a document comes from: shipped with agentflow, or added by an operator."""

TAG_WEIGHT = 1.0
"""Score of each word of each document tag that occurs as a phrase in the scenario ("get
well" in "get well plan" scores 2): the strongest signal, since tags name the scenarios a
document is written for, and a longer tag that matches says more than a shorter one."""
TITLE_WEIGHT = 0.5
"""Score when every word of the scenario is in the document's title (a share for some)."""
ALL_WORDS_WEIGHT = 0.25
"""Bonus of a chunk that holds every word of the scenario (``websearch_to_tsquery``)."""


@frozen
class DocumentRecord:
    """A document as listed: everything but its body."""

    id: UUID
    workspace_id: UUID
    title: str
    source: str
    tags: tuple[str, ...]
    content_hash: str
    chunks: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record | dict[str, Any]) -> DocumentRecord:
        """From a row of ``knowledge_documents`` plus a ``chunks`` count."""
        return cls(
            id=row["id"], workspace_id=row["workspace_id"], title=row["title"], source=row["source"],
            tags=tuple(row["tags"]), content_hash=row["content_hash"], chunks=row["chunks"],
            created_at=row["created_at"], updated_at=row["updated_at"],
        )  # fmt: skip


@frozen
class NewChunk:
    """A chunk to write: its section heading (None before the first one) and its text."""

    heading: str | None
    body: str


@frozen
class StoredChunk:
    """A chunk of a document, in document order."""

    n: int
    heading: str | None
    body: str


@frozen
class ChunkHit:
    """A chunk a search found, with its document and its score (higher is better)."""

    document_id: UUID
    n: int
    title: str
    source: str
    heading: str | None
    body: str
    score: float

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> ChunkHit:
        """From a search's row (``document_id, n, title, source, heading, body, score``)."""
        return cls(
            document_id=row["document_id"], n=row["n"], title=row["title"], source=row["source"],
            heading=row["heading"], body=row["body"], score=float(row["score"]),
        )  # fmt: skip


_DOCUMENT_COLUMNS = (
    "d.workspace_id, d.id, d.title, d.source, d.tags, d.content_hash, d.created_at, d.updated_at,"
    " (SELECT count(*) FROM knowledge_chunks c WHERE c.workspace_id = d.workspace_id"
    "  AND c.document_id = d.id)::int AS chunks"
)

# The update applies only when the content differs, and a shipped playbook never replaces an
# operator's document of the same title ($8: whether this write may replace one).
_UPSERT = """
INSERT INTO knowledge_documents AS d (workspace_id, id, title, source, tags, body, content_hash)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (workspace_id, title) DO UPDATE SET
    source = EXCLUDED.source, tags = EXCLUDED.tags, body = EXCLUDED.body,
    content_hash = EXCLUDED.content_hash, updated_at = now()
WHERE (d.content_hash <> EXCLUDED.content_hash OR d.source <> EXCLUDED.source)
  AND (d.source = 'builtin' OR $8)
RETURNING id
"""


async def upsert(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    new_id: UUID,
    *,
    title: str,
    source: str,
    tags: Sequence[str],
    body: str,
    content_hash: str,
    chunks: Sequence[NewChunk],
) -> tuple[DocumentRecord, bool]:
    """Write a document and replace its chunks, in one transaction.

    A document with the same title is replaced (keeping its id) unless its content is the
    same; a ``builtin`` write never replaces an ``operator`` document.

    Returns:
        The document as stored, and whether anything was written.

    Raises:
        NotFoundError: ``workspace_not_found``.
    """
    try:
        async with pool.acquire() as conn, conn.transaction():
            doc_id = await conn.fetchval(
                _UPSERT, workspace_id, new_id, title, source, list(tags), body, content_hash,
                source == "operator",
            )  # fmt: skip
            if doc_id is not None:
                await conn.execute(
                    "DELETE FROM knowledge_chunks WHERE workspace_id = $1 AND document_id = $2",
                    workspace_id,
                    doc_id,
                )
                await conn.execute(
                    "INSERT INTO knowledge_chunks (workspace_id, document_id, n, heading, body)"
                    " SELECT $1, $2, t.n - 1, t.heading, t.body"
                    " FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS t(heading, body, n)",
                    workspace_id, doc_id, [c.heading for c in chunks], [c.body for c in chunks],
                )  # fmt: skip
            row = await conn.fetchrow(
                f"SELECT {_DOCUMENT_COLUMNS} FROM knowledge_documents d"
                " WHERE d.workspace_id = $1 AND d.title = $2",
                workspace_id,
                title,
            )
    except asyncpg.ForeignKeyViolationError:
        raise NotFoundError(
            "workspace_not_found",
            f"workspace {workspace_id} does not exist",
            solution="Check the workspace id.",
        ) from None
    assert row is not None
    return DocumentRecord.from_row(row), doc_id is not None


async def hashes(pool: asyncpg.Pool, workspace_id: UUID, titles: Sequence[str]) -> dict[str, tuple[str, str]]:
    """``{title: (source, content_hash)}`` of the builtin documents and of those titled ``titles``."""
    rows = await pool.fetch(
        "SELECT title, source, content_hash FROM knowledge_documents"
        " WHERE workspace_id = $1 AND (source = 'builtin' OR title = ANY($2::text[]))",
        workspace_id,
        list(titles),
    )
    return {r["title"]: (r["source"], r["content_hash"]) for r in rows}


async def delete_builtin(pool: asyncpg.Pool, workspace_id: UUID, titles: Sequence[str]) -> int:
    """Delete the builtin documents titled ``titles`` (playbooks no longer shipped)."""
    result = await pool.execute(
        "DELETE FROM knowledge_documents WHERE workspace_id = $1 AND source = 'builtin'"
        " AND title = ANY($2::text[])",
        workspace_id,
        list(titles),
    )
    return int(result.split()[-1])


async def list_documents(pool: asyncpg.Pool, workspace_id: UUID) -> list[DocumentRecord]:
    """Every document of the workspace: builtin first, then by title."""
    rows = await pool.fetch(
        f"SELECT {_DOCUMENT_COLUMNS} FROM knowledge_documents d WHERE d.workspace_id = $1"
        " ORDER BY d.source, d.title",
        workspace_id,
    )
    return [DocumentRecord.from_row(r) for r in rows]


async def delete(pool: asyncpg.Pool, workspace_id: UUID, document_id: UUID) -> DocumentRecord | None:
    """Delete an operator's document (its chunks go with it); None when there is no such one."""
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(
            f"SELECT {_DOCUMENT_COLUMNS} FROM knowledge_documents d"
            " WHERE d.workspace_id = $1 AND d.id = $2 AND d.source = 'operator' FOR UPDATE",
            workspace_id,
            document_id,
        )
        if row is None:
            return None
        await conn.execute(
            "DELETE FROM knowledge_documents WHERE workspace_id = $1 AND id = $2", workspace_id, document_id
        )
    return DocumentRecord.from_row(row)


async def source_of(pool: asyncpg.Pool, workspace_id: UUID, document_id: UUID) -> str | None:
    """The source of a document, or None when there is no such document."""
    value: str | None = await pool.fetchval(
        "SELECT source FROM knowledge_documents WHERE workspace_id = $1 AND id = $2",
        workspace_id,
        document_id,
    )
    return value


async def chunks_of(pool: asyncpg.Pool, workspace_id: UUID, document_id: UUID) -> list[StoredChunk]:
    """A document's chunks in order."""
    rows = await pool.fetch(
        "SELECT n, heading, body FROM knowledge_chunks WHERE workspace_id = $1 AND document_id = $2"
        " ORDER BY n",
        workspace_id,
        document_id,
    )
    return [StoredChunk(r["n"], r["heading"], r["body"]) for r in rows]


# q_any matches chunks holding any of the scenario's words (plainto_tsquery's AND turned
# into OR: its text form quotes every lexeme, so only the operators change); q_all holds all
# of them. A tag scores when it occurs in the scenario as a phrase, stemmed ("renewals" finds
# the tag "renewal"), by its number of words (a phrase of n words has 2n - 1 nodes); an empty
# tag query (a tag of stop words only) never does.
_SEARCH = f"""
WITH q AS (
    SELECT replace(plainto_tsquery('english', $2)::text, ' & ', ' | ')::tsquery AS q_any,
           websearch_to_tsquery('english', $2) AS q_all,
           to_tsvector('english', $2) AS q_vec
), docs AS (
    SELECT d.id, d.title, d.source,
           (SELECT coalesce(sum((numnode(t.query) + 1) / 2), 0)
              FROM (SELECT phraseto_tsquery('english', tag) AS query FROM unnest(d.tags) AS tag) AS t
             WHERE numnode(t.query) > 0 AND q.q_vec @@ t.query) AS tag_hits,
           (SELECT count(*) FROM unnest(tsvector_to_array(q.q_vec)) AS w(word)
             WHERE w.word = ANY (tsvector_to_array(to_tsvector('english', d.title))))::float8
             / greatest(length(q.q_vec), 1) AS title_share
      FROM knowledge_documents d, q
     WHERE d.workspace_id = $1
)
SELECT c.document_id, c.n, docs.title, docs.source, c.heading, c.body,
       {TAG_WEIGHT} * docs.tag_hits + {TITLE_WEIGHT} * docs.title_share
       + ts_rank(c.tsv, q.q_any, 32)
       + CASE WHEN c.tsv @@ q.q_all THEN {ALL_WORDS_WEIGHT} ELSE 0 END AS score
  FROM knowledge_chunks c
  JOIN docs ON docs.id = c.document_id, q
 WHERE c.workspace_id = $1 AND numnode(q.q_any) > 0 AND (c.tsv @@ q.q_any OR docs.tag_hits > 0)
 ORDER BY score DESC, docs.title, c.n
 LIMIT $3
"""


async def search_text(pool: asyncpg.Pool, workspace_id: UUID, scenario: str, limit: int) -> list[ChunkHit]:
    """The ``limit`` chunks that best match ``scenario`` by words and tags, best first."""
    rows = await pool.fetch(_SEARCH, workspace_id, scenario, limit)
    return [ChunkHit.from_row(r) for r in rows]
