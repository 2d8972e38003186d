"""Reading knowledge documents: front matter, sections, chunks, list items and step lines."""

from __future__ import annotations

import pytest

from agentflow.core.errors import ConfigError
from agentflow.knowledge.documents import MAX_CHUNK, chunk_markdown, prepare_document, suggest_title
from agentflow.knowledge.markdown import bullet_items, numbered_items, split_front_matter, split_sections
from agentflow.knowledge.plans import PlanStep, parse_step


def test_a_long_section_is_cut_between_lines_never_inside_a_step() -> None:
    steps = "\n".join(
        f"{i}. Step {i} " + "word " * 60 + f"(owner: CSM; due: within {i} days)" for i in range(1, 13)
    )
    chunks = chunk_markdown(f"Intro line.\n\n## Steps\n\n{steps}\n\n## Done when\n\n- done", "Doc")
    cut = [c for c in chunks if c.heading == "Steps"]
    assert len(cut) > 1 and all(len(c.body) <= MAX_CHUNK for c in cut)
    assert [c.heading for c in chunks] == ["Doc", *["Steps"] * len(cut), "Done when"]
    items = numbered_items("\n".join(c.body for c in cut))
    assert len(items) == 12
    assert [parse_step(n, item).due_in for n, item in enumerate(items, 1)] == [
        f"within {i} days" for i in range(1, 13)
    ]


def test_a_line_longer_than_a_chunk_is_cut_at_spaces() -> None:
    chunks = chunk_markdown("word " * 1000, "Doc")
    assert len(chunks) == 3 and all(0 < len(c.body) <= MAX_CHUNK for c in chunks)
    assert " ".join(c.body for c in chunks).split() == ["word"] * 1000


def test_headings_in_fenced_code_are_text() -> None:
    sections = split_sections("# Title\n\nText.\n\n```\n# not a heading\n```\n\n## Real\n\nMore.\n## Empty\n")
    assert [(s.heading, s.level) for s in sections] == [("Title", 1), ("Real", 2)]
    assert "# not a heading" in sections[0].text


def test_list_items_keep_their_continuation_lines() -> None:
    text = "1. First\n   goes on\n2) Second\nlazy line\n\n   indented after a blank\n\nA paragraph after.\n3. Third"
    assert numbered_items(text) == ["First goes on", "Second lazy line indented after a blank", "Third"]
    assert bullet_items("- **a**\n* b\n  more\n\nnot an item\n+ `c`") == ["a", "b more", "c"]


@pytest.mark.parametrize(
    ("item", "step"),
    [
        (
            "**Call.** Now. (owner: CSM; due: within 2 hours)",
            PlanStep(1, "Call. Now.", "CSM", "within 2 hours"),
        ),
        ("Call. *(Owner: AE; Due: today)*", PlanStep(1, "Call.", "AE", "today")),
        ("Call. (due: within 1 week)", PlanStep(1, "Call.", None, "within 1 week")),
        ("Call (the sponsor) first.", PlanStep(1, "Call (the sponsor) first.", None, None)),
    ],
)
def test_step_lines_give_action_owner_and_due(item: str, step: PlanStep) -> None:
    assert parse_step(1, item) == step


def test_front_matter_and_titles() -> None:
    assert split_front_matter("no front matter") == ({}, "no front matter")
    assert split_front_matter("\ufeff---\ntitle: T\ntags: [a]\n---\n# H\nx") == (
        {"title": "T", "tags": ["a"]},
        "# H\nx",
    )
    assert suggest_title("---\ntitle: From meta\n---\n# Heading") == "From meta"
    assert suggest_title("Intro\n\n## The **heading**") == "The heading"
    assert suggest_title("plain text") is None
    doc = prepare_document(
        "T", "---\ntags: [Churn, at risk]\nscenarios: get well\n---\nBody", ["churn", " x  y "]
    )
    assert doc.tags == ("churn", "x y", "at risk", "get well"), "merged, trimmed, case-insensitively unique"
    assert doc.body == "Body" and [c.heading for c in doc.chunks] == ["T"]
    assert prepare_document("T", "Body", ["churn"]).content_hash != doc.content_hash
    with pytest.raises(ConfigError):
        split_front_matter("---\ntitle: x\n")
