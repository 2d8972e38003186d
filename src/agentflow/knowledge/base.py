"""The knowledge base as the engine exposes it: ``engine.knowledge``.

It holds customer-success playbooks (those agentflow ships and operators' own documents) per
workspace, finds the passages that match a scenario, and composes a plan from the best
playbook: what the agent tool ``generate_plan(scenario)`` returns.

Example:
    >>> plan = await engine.knowledge.plan("get well plan")          # doctest: +SKIP
    >>> plan.playbook.title, plan.steps[0].owner, plan.steps[0].due_in  # doctest: +SKIP
    ('Get-well plan for an account at risk of churn', 'CSM', 'within 1 business day')
"""

from __future__ import annotations

import builtins
import logging
import uuid
from collections.abc import Iterable
from uuid import UUID

from agentflow.core.errors import ConfigError, ConflictError, NotFoundError
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.knowledge.builtin import builtin_playbooks
from agentflow.knowledge.documents import check_scenario, prepare_document
from agentflow.knowledge.embedding import BATCH, Embedder, check_vectors, configured_embedder
from agentflow.knowledge.passages import Passage, rank_hits, to_passage
from agentflow.knowledge.plans import Plan, compose_plan, empty_plan
from agentflow.llm.base import ModelError
from agentflow.store import knowledge, knowledge_vectors
from agentflow.store.database import Database
from agentflow.store.knowledge import ChunkHit, DocumentRecord

logger = logging.getLogger(__name__)

CANDIDATES = 20
"""How many chunks each search (full text, vector) fetches at least before they are ranked
together."""
PLAN_HITS = 10
"""How many passages a plan considers (the best one's document, the others as related)."""
MAX_EMBED_PER_SEARCH = 2_000
"""The most chunks one search embeds (the rest are embedded by the searches after it)."""


class KnowledgeBase:
    """Add, list, search and plan from knowledge documents.

    The bundled playbooks are loaded into a workspace the first time this object touches it
    (``ensure_builtin``), so every workspace starts with them.

    Args:
        db: the database.
        embedder: the knowledge base's own embedder; default: the one ``AGENTFLOW_EMBEDDINGS``
            configures (``local``: all-MiniLM-L6-v2 on the CPU; ``provider``: none).

    Attributes:
        embedder: its own embedder, or None. When it has one, every search ranks by meaning
            with it (whatever embedder a caller passes: one set of vectors, no re-embedding
            back and forth), and if it fails the search falls back to keywords.

    Raises:
        ConfigError: ``local_embeddings_unavailable`` for ``AGENTFLOW_EMBEDDINGS=local``
            without the ``local-embeddings`` extra.
    """

    def __init__(self, db: Database, *, embedder: Embedder | None = None) -> None:
        self.db = db
        self.embedder = embedder if embedder is not None else configured_embedder(db.settings)
        self._seeded: set[UUID] = set()
        self._vectors: bool | None = None

    async def ensure_builtin(self, workspace_id: UUID = DEFAULT_WORKSPACE) -> int:
        """Load the bundled playbooks into a workspace: those missing or changed since.

        Idempotent, and cheap when they are there already (one query comparing content
        hashes). A bundled playbook never replaces an operator's document of the same title,
        and a playbook agentflow no longer ships is removed.

        Returns:
            How many documents were written or removed (0 when all were up to date).

        Raises:
            NotFoundError: ``workspace_not_found``.
        """
        shipped = builtin_playbooks()
        titles = {p.title for p in shipped}
        stored = await knowledge.hashes(self.db.pool, workspace_id, sorted(titles))
        changed = 0
        for playbook in shipped:
            source, digest = stored.get(playbook.title, ("builtin", ""))
            if source != "builtin" or digest == playbook.content_hash:
                continue
            _, written = await knowledge.upsert(
                self.db.pool, workspace_id, uuid.uuid4(), title=playbook.title, source="builtin",
                tags=playbook.tags, body=playbook.body, content_hash=playbook.content_hash,
                chunks=playbook.chunks,
            )  # fmt: skip
            changed += written
        gone = [t for t, (source, _) in stored.items() if source == "builtin" and t not in titles]
        if gone:
            changed += await knowledge.delete_builtin(self.db.pool, workspace_id, gone)
        self._seeded.add(workspace_id)
        return changed

    async def add(
        self,
        title: str,
        body: str,
        *,
        tags: Iterable[str] = (),
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> DocumentRecord:
        """Add an operator's document, or replace the one with the same title.

        Adding the same content again writes nothing. A document titled like a bundled
        playbook replaces it in this workspace (and upgrades leave it alone).

        Args:
            title: one line, at most 200 characters.
            body: markdown or plain text, at most 200,000 characters; it is cut into chunks at
                its headings. A YAML front matter's ``tags`` and ``scenarios`` become tags.
            tags: words and phrases of the scenarios it is for ("churn", "at risk").

        Raises:
            ConfigError: ``knowledge_invalid``, listing each offending field; nothing is written.
            NotFoundError: ``workspace_not_found``.
        """
        prepared = prepare_document(title, body, tags)
        await self._ensure_seeded(workspace_id)
        record, _ = await knowledge.upsert(
            self.db.pool, workspace_id, uuid.uuid4(), title=prepared.title, source="operator",
            tags=prepared.tags, body=prepared.body, content_hash=prepared.content_hash,
            chunks=prepared.chunks,
        )  # fmt: skip
        return record

    async def list(self, *, workspace_id: UUID = DEFAULT_WORKSPACE) -> builtins.list[DocumentRecord]:
        """Every document of the workspace (without bodies): bundled first, then by title."""
        await self._ensure_seeded(workspace_id)
        return await knowledge.list_documents(self.db.pool, workspace_id)

    async def delete(
        self, document_id: UUID | str, *, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> DocumentRecord:
        """Delete an operator's document.

        Raises:
            NotFoundError: ``knowledge_not_found`` (also for a malformed id).
            ConflictError: ``knowledge_builtin`` for a bundled playbook (override it instead:
                add a document with its title).
        """
        doc_id = _document_id(document_id)
        deleted = await knowledge.delete(self.db.pool, workspace_id, doc_id)
        if deleted is not None:
            # It may have overridden a bundled playbook: the next use brings that back.
            self._seeded.discard(workspace_id)
            return deleted
        if await knowledge.source_of(self.db.pool, workspace_id, doc_id) == "builtin":
            raise ConflictError(
                "knowledge_builtin",
                "bundled playbooks cannot be deleted",
                solution="Add a document with the same title to replace it in this workspace.",
            )
        raise NotFoundError("knowledge_not_found", f"no knowledge document {document_id} in this workspace")

    async def search(
        self,
        scenario: str,
        *,
        limit: int = 5,
        workspace_id: UUID = DEFAULT_WORKSPACE,
        embedder: Embedder | None = None,
    ) -> builtins.list[Passage]:
        """The passages that best match a scenario, best first.

        Full-text search finds chunks holding the scenario's words (stemmed: "renewals" finds
        "renewal") and favours documents whose tags occur in the scenario ("get well" in "get
        well plan") or whose title holds its words. With an ``embedder``, and where the
        database has pgvector, chunks are also ranked by cosine similarity to the scenario
        (chunks not yet embedded are embedded first).

        Args:
            scenario: a few words ("expansion", "customer at risk of churn"), at most 1,000
                characters.
            limit: at most this many passages (1 to 50).
            embedder: optional, used when the knowledge base has no embedder of its own; see
                ``agentflow.knowledge.Embedder``.

        Raises:
            ConfigError: ``knowledge_query_invalid``; ``embedder_invalid`` for bad vectors.
        """
        text = check_scenario(scenario, limit)
        hits = await self._retrieve(text, workspace_id, embedder, max(limit, CANDIDATES))
        return [to_passage(hit) for hit in hits[:limit]]

    async def plan(
        self, scenario: str, *, workspace_id: UUID = DEFAULT_WORKSPACE, embedder: Embedder | None = None
    ) -> Plan:
        """A plan for a scenario from the best-matching playbook, with citations.

        The steps are the playbook's numbered steps in order (action, owner, due offset). When
        nothing matches, the plan has no steps and its summary says so.

        Raises:
            ConfigError: ``knowledge_query_invalid``; ``embedder_invalid`` for bad vectors.
        """
        text = check_scenario(scenario)
        hits = (await self._retrieve(text, workspace_id, embedder, CANDIDATES))[:PLAN_HITS]
        if not hits:
            return empty_plan(text)
        chunks = await knowledge.chunks_of(self.db.pool, workspace_id, hits[0].document_id)
        return compose_plan(text, hits, chunks)

    async def _retrieve(
        self, scenario: str, workspace_id: UUID, embedder: Embedder | None, candidates: int
    ) -> builtins.list[ChunkHit]:
        await self._ensure_seeded(workspace_id)
        text_hits = await knowledge.search_text(self.db.pool, workspace_id, scenario, candidates)
        vector_hits: builtins.list[ChunkHit] = []
        chosen = self.embedder if self.embedder is not None else embedder
        if chosen is not None and await self._vectors_available():
            try:
                vector_hits = await self._search_vectors(chosen, scenario, workspace_id, candidates)
            except (ModelError, ConfigError) as exc:
                if chosen is not self.embedder:
                    raise
                logger.warning("knowledge search by meaning failed (%s); searching by keywords only", exc)
        return rank_hits(text_hits, vector_hits)

    async def _search_vectors(
        self, embedder: Embedder, scenario: str, workspace_id: UUID, candidates: int
    ) -> builtins.list[ChunkHit]:
        (query,) = check_vectors(await embedder.embed([scenario]), 1)
        await self._embed_missing(embedder, workspace_id, len(query))
        return await knowledge_vectors.search(self.db.pool, workspace_id, query, candidates)

    async def _embed_missing(self, embedder: Embedder, workspace_id: UUID, dimensions: int) -> None:
        pending = await knowledge_vectors.missing(
            self.db.pool, workspace_id, dimensions, MAX_EMBED_PER_SEARCH
        )
        for start in range(0, len(pending), BATCH):
            batch = pending[start : start + BATCH]
            texts = [f"{c.title}\n{c.heading or ''}\n{c.body}" for c in batch]
            vectors = check_vectors(await embedder.embed(texts), len(texts), dimensions)
            await knowledge_vectors.store(
                self.db.pool,
                workspace_id,
                [(c.document_id, c.n, v) for c, v in zip(batch, vectors, strict=True)],
            )

    async def _ensure_seeded(self, workspace_id: UUID) -> None:
        if workspace_id not in self._seeded:
            await self.ensure_builtin(workspace_id)

    async def _vectors_available(self) -> bool:
        if self._vectors is None:
            self._vectors = await knowledge_vectors.available(self.db.pool)
        return self._vectors


def _document_id(value: UUID | str) -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(value)
    except ValueError:
        raise NotFoundError("knowledge_not_found", f"{value[:80]!r} is not a knowledge document id") from None
