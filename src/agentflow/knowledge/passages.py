"""Passages: the chunks a search returns, and how full-text and vector hits are ranked together."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any
from uuid import UUID

from agentflow.core.frozen import frozen
from agentflow.store.knowledge import ChunkHit

VECTOR_WEIGHT = 1.0
"""How much a chunk's cosine similarity to the scenario (0 to 1) adds to its full-text score.

Full-text scores are 1 per word of each document tag that occurs in the scenario plus up to
about 1 for the words of the text (see ``agentflow.store.knowledge``), so a close paraphrase
(similarity 0.8 and more) can outrank a weak word match, while a scenario naming a
document's tags stays with it.
"""


@frozen
class Passage:
    """A piece of a knowledge document that matches a scenario.

    Attributes:
        document_id: the document it comes from.
        title: the document's title.
        heading: the section it is in.
        text: the section's text (markdown), or part of it for a long section.
        score: how well it matches (higher is better; comparable within one search only).
        source: ``builtin`` (shipped with agentflow) or ``operator``.
    """

    document_id: UUID
    title: str
    heading: str | None
    text: str
    score: float
    source: str

    def to_json(self) -> dict[str, Any]:
        """A JSON object of the passage."""
        return {
            "document_id": str(self.document_id),
            "title": self.title,
            "heading": self.heading,
            "text": self.text,
            "score": round(self.score, 4),
            "source": self.source,
        }


def rank_hits(text_hits: Sequence[ChunkHit], vector_hits: Sequence[ChunkHit] = ()) -> list[ChunkHit]:
    """Both searches' hits as one ranking, best first.

    A chunk's score is its full-text score plus ``VECTOR_WEIGHT`` times its (positive)
    similarity; ties go to the document title, then the chunk's position, so the order is
    deterministic.
    """
    merged: dict[tuple[UUID, int], ChunkHit] = {(h.document_id, h.n): h for h in text_hits}
    for hit in vector_hits:
        key = (hit.document_id, hit.n)
        bonus = VECTOR_WEIGHT * max(hit.score, 0.0)
        known = merged.get(key)
        merged[key] = (
            replace(hit, score=bonus) if known is None else replace(known, score=known.score + bonus)
        )
    return sorted(merged.values(), key=lambda h: (-h.score, h.title, h.n))


def to_passage(hit: ChunkHit) -> Passage:
    """The passage of a hit."""
    return Passage(hit.document_id, hit.title, hit.heading, hit.body, hit.score, hit.source)
