"""Plans: the answer of ``generate_plan(scenario)``, composed from the best-matching playbook.

Composing is deterministic (no model call): the same scenario over the same knowledge gives
the same plan. The best document's numbered steps become the plan's steps, each step's
trailing ``(owner: ROLE; due: OFFSET)`` giving its owner and due offset; its "When to use"
section gives the summary, "Signals to watch" the signals and "Done when" the exit criteria.
Every section used is cited.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from agentflow.core.frozen import frozen
from agentflow.knowledge.markdown import bullet_items, numbered_items, plain
from agentflow.store.knowledge import ChunkHit, StoredChunk

MAX_RELATED = 3
"""How many other matching documents a plan names."""
RELATED_SHARE = 0.4
"""A document is named as related when its best passage scores at least this share of the
best one's (a word in common is not relatedness)."""
MAX_SUMMARY = 400
"""The longest summary, in characters."""

_STEP_META = re.compile(r"[*_]*\(\s*((?:owner|due)\s*:[^()]*)\)[*_]*\s*$", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@frozen
class PlanStep:
    """One step of a plan: what to do, who does it, and when it is due (as the playbook says,
    e.g. "within 2 business days"); owner and due_in are None when the playbook does not say."""

    n: int
    action: str
    owner: str | None
    due_in: str | None

    def to_json(self) -> dict[str, Any]:
        """A JSON object of the step."""
        return {"n": self.n, "action": self.action, "owner": self.owner, "due_in": self.due_in}


@frozen
class Citation:
    """A section of a knowledge document a plan used."""

    document_id: UUID
    title: str
    heading: str | None

    def to_json(self) -> dict[str, Any]:
        """A JSON object of the citation."""
        return {"document_id": str(self.document_id), "title": self.title, "heading": self.heading}

    def reference_json(self) -> dict[str, Any]:
        """A JSON object naming the document only."""
        return {"document_id": str(self.document_id), "title": self.title}


@frozen
class Plan:
    """A plan for a scenario, from the playbook that matches it best.

    Attributes:
        scenario: the scenario asked about.
        playbook: the document followed (None when nothing matched).
        summary: one or two sentences: which playbook, and when it applies.
        steps: the playbook's steps, in order, numbered from 1.
        signals: what to watch while the plan runs.
        done_when: when the plan is finished.
        citations: every section the plan was composed from.
        related: other documents that matched, best first.
    """

    scenario: str
    playbook: Citation | None
    summary: str
    steps: tuple[PlanStep, ...]
    signals: tuple[str, ...]
    done_when: tuple[str, ...]
    citations: tuple[Citation, ...]
    related: tuple[Citation, ...]

    def to_json(self) -> dict[str, Any]:
        """A JSON object of the plan (what the agent tool returns to the model)."""
        return {
            "scenario": self.scenario,
            "playbook": None if self.playbook is None else self.playbook.reference_json(),
            "summary": self.summary,
            "steps": [step.to_json() for step in self.steps],
            "signals": list(self.signals),
            "done_when": list(self.done_when),
            "citations": [c.to_json() for c in self.citations],
            "related": [r.reference_json() for r in self.related],
        }


def empty_plan(scenario: str) -> Plan:
    """The plan when no document matches ``scenario``."""
    summary = (
        f"No document in the knowledge base matches {scenario!r}. Decide the next steps from the"
        " account's context, or add a playbook for this scenario."
    )
    return Plan(scenario, None, summary, (), (), (), (), ())


def compose_plan(scenario: str, hits: Sequence[ChunkHit], chunks: Sequence[StoredChunk]) -> Plan:
    """The plan for ``scenario`` from the best hit's document.

    Args:
        scenario: the scenario asked about.
        hits: the search's hits, best first (at least one).
        chunks: every chunk of the best hit's document, in order.
    """
    best = hits[0]
    playbook = Citation(best.document_id, best.title, None)
    used: list[StoredChunk] = []

    def section(*words: str) -> list[StoredChunk]:
        found = [c for c in chunks if c.heading and any(w in c.heading.casefold() for w in words)]
        used.extend(c for c in found if c not in used)
        return found

    intro = section("when to use", "when to run", "purpose") or _first(chunks, best)
    steps_text = "\n".join(c.body for c in section("step"))
    if not steps_text:  # a document without a "Steps" section: its first numbered list
        listed = [c for c in chunks if numbered_items(c.body)][:1]
        used.extend(listed)
        steps_text = "\n".join(c.body for c in listed)
    steps = tuple(parse_step(i, item) for i, item in enumerate(numbered_items(steps_text), start=1))
    signals = tuple(item for c in section("signal", "watch") for item in bullet_items(c.body))
    done = tuple(
        item for c in section("done when", "exit", "success criteria") for item in bullet_items(c.body)
    )
    used.extend(c for c in intro if c not in used)
    citations = tuple(
        dict.fromkeys(Citation(best.document_id, best.title, c.heading) for c in _ordered(used))
    )
    others = [h for h in hits if h.document_id != best.document_id and h.score >= RELATED_SHARE * best.score]
    related = tuple(dict.fromkeys(Citation(h.document_id, h.title, None) for h in others))[:MAX_RELATED]
    return Plan(
        scenario=scenario,
        playbook=playbook,
        summary=_summary(best.title, intro, len(steps)),
        steps=steps,
        signals=signals,
        done_when=done,
        citations=citations,
        related=related,
    )


def parse_step(n: int, item: str) -> PlanStep:
    """A step from a numbered item: ``Do this. (owner: CSM; due: within 2 business days)``."""
    owner = due = None
    action = item
    meta = _STEP_META.search(item)
    if meta is not None:
        action = item[: meta.start()]
        for part in meta.group(1).split(";"):
            key, _, value = part.partition(":")
            name, text = key.strip().casefold(), plain(value) or None
            if name == "owner":
                owner = text
            elif name == "due":
                due = text
    return PlanStep(n, plain(action), owner, due)


def _first(chunks: Sequence[StoredChunk], best: ChunkHit) -> list[StoredChunk]:
    """Without a "When to use" section, the section that matched best introduces the plan."""
    return [c for c in chunks if c.n == best.n][:1] or [StoredChunk(best.n, best.heading, best.body)]


def _ordered(chunks: Sequence[StoredChunk]) -> list[StoredChunk]:
    return sorted(chunks, key=lambda c: c.n)


def _summary(title: str, intro: Sequence[StoredChunk], step_count: int) -> str:
    text = plain(" ".join(c.body for c in intro))
    sentences = _SENTENCE_END.split(text)
    lead = sentences[0] if sentences else ""
    if len(lead) > MAX_SUMMARY:
        lead = lead[: MAX_SUMMARY - 1].rsplit(" ", 1)[0] + "…"
    counted = f" ({step_count} steps)" if step_count else ""
    return f"Follow the playbook “{title}”{counted}. {lead}".strip()
