"""The knowledge base behind generate_plan: bundled playbooks, retrieval, plans, workspaces, vectors."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from typing import Any, ClassVar
from uuid import UUID

import pytest

from agentflow.core.errors import ConfigError, ConflictError, NotFoundError
from agentflow.engine import DEFAULT_WORKSPACE, Engine
from agentflow.knowledge.builtin import builtin_playbooks
from agentflow.knowledge.markdown import split_front_matter, split_sections

CHURN = "Get-well plan for an account at risk of churn"
EXPANSION = "Expansion when an account reaches its license limits"
ADOPTION = "Driving adoption when product usage is low"
ONBOARDING = "Onboarding a new customer"
RENEWAL = "Preparing and closing a renewal"
ESCALATION = "Handling a customer escalation"
PRICING = "Responding to pricing concerns"
MEETING = "Turning meeting action items into tasks"

# What an agent (or a person) types, and the playbook that must come first.
SCENARIOS = [
    ("get well plan", CHURN),
    ("get well plan for churn risk", CHURN),
    ("customer at risk of churning", CHURN),
    ("health score drop", CHURN),
    ("our champion left the company", CHURN),
    ("expansion", EXPANSION),
    ("expansion at license limit", EXPANSION),
    ("seats running out", EXPANSION),
    ("adoption", ADOPTION),
    ("users not logging in", ADOPTION),
    ("onboarding", ONBOARDING),
    ("new customer kickoff", ONBOARDING),
    ("renewal", RENEWAL),
    ("renewals coming up next quarter", RENEWAL),
    ("executive escalation", ESCALATION),
    ("severe support issue", ESCALATION),
    ("pricing", PRICING),
    ("pricing concerns", PRICING),
    ("too expensive", PRICING),
    ("meeting follow-up", MEETING),
    ("action items from the call", MEETING),
]

OPERATOR_DOC = """---
tags: [save desk]
scenarios: [cancellation request]
---
# Save desk

Route every written cancellation request to the save desk before anything is processed.

## Steps

1. Log the request in the save desk queue. (owner: Support Engineer; due: within 4 hours)
2. Call the customer with a retention offer.
   Offer a pause before a discount. (owner: Save Desk Lead; due: within 1 business day)
3. Record the outcome.
"""


async def new_workspace(engine: Engine) -> UUID:
    workspace = uuid.uuid4()
    await engine.db.pool.execute(
        "INSERT INTO workspaces (id, name) VALUES ($1, $2)", workspace, str(workspace)
    )
    return workspace


def test_every_bundled_playbook_is_complete() -> None:
    playbooks = builtin_playbooks()
    expected = {CHURN, EXPANSION, ADOPTION, ONBOARDING, RENEWAL, ESCALATION, PRICING, MEETING}
    assert {p.title for p in playbooks} >= expected
    for playbook in playbooks:
        words = len(playbook.body.split())
        assert 300 <= words <= 700, (playbook.title, words)
        headings = [s.heading for s in split_sections(playbook.body)]
        assert {"When to use", "Steps", "Signals to watch", "Done when"} <= set(headings), playbook.title
        steps = [line for line in playbook.body.splitlines() if re.match(r"\d+\. ", line)]
        assert len(steps) >= 5, playbook.title
        for line in steps:  # every step says who does it and by when
            assert re.search(r"\(owner: [^;()]+; due: [^()]+\)$", line), line
        assert len(playbook.tags) >= 8, playbook.title
        assert split_front_matter(playbook.body)[0] == {}, "the body is the markdown after the front matter"


async def test_bundled_playbooks_load_once_and_follow_upgrades(engine: Engine) -> None:
    shipped = builtin_playbooks()
    assert await engine.knowledge.ensure_builtin() == len(shipped)
    first = await engine.knowledge.list()
    assert [d.source for d in first] == ["builtin"] * len(shipped)
    assert all(d.chunks >= 4 for d in first)
    chunks = await engine.db.pool.fetchval("SELECT count(*) FROM knowledge_chunks")

    assert await engine.knowledge.ensure_builtin() == 0, "already there: nothing written"
    assert await engine.knowledge.list() == first, "same ids, same timestamps"
    assert await engine.db.pool.fetchval("SELECT count(*) FROM knowledge_chunks") == chunks

    # An older agentflow's version of a playbook is replaced (keeping its id); one no longer
    # shipped is removed.
    await engine.db.pool.execute(
        "UPDATE knowledge_documents SET content_hash = 'old' WHERE title = $1", RENEWAL
    )
    await engine.db.pool.execute("DELETE FROM knowledge_chunks WHERE document_id = $1", _id(first, RENEWAL))
    await engine.db.pool.execute(
        "INSERT INTO knowledge_documents (workspace_id, id, title, source, body, content_hash)"
        " VALUES ($1, gen_random_uuid(), 'Retired playbook', 'builtin', 'old text', 'x')",
        DEFAULT_WORKSPACE,
    )
    assert await engine.knowledge.ensure_builtin() == 2
    after = await engine.knowledge.list()
    assert [(d.id, d.title, d.chunks) for d in after] == [(d.id, d.title, d.chunks) for d in first]


async def test_each_scenario_finds_its_playbook_first(engine: Engine) -> None:
    wrong = []
    for scenario, title in SCENARIOS:
        passages = await engine.knowledge.search(scenario, limit=3)
        if not passages or passages[0].title != title:
            wrong.append((scenario, [p.title for p in passages]))
        plan = await engine.knowledge.plan(scenario)
        assert plan.playbook is not None and plan.playbook.title == passages[0].title
    assert wrong == []
    assert await engine.knowledge.search("zzzz qqqq") == []


async def test_plan_has_ordered_steps_and_citations_of_real_sections(engine: Engine) -> None:
    plan = await engine.knowledge.plan("get well plan")
    assert plan.playbook is not None and plan.playbook.title == CHURN
    assert [s.n for s in plan.steps] == list(range(1, len(plan.steps) + 1)) and len(plan.steps) == 8
    assert plan.steps[0].action.startswith("Confirm the risk and name its cause.")
    assert (plan.steps[0].owner, plan.steps[0].due_in) == ("CSM", "within 1 business day")
    assert plan.steps[5].owner == "CS Manager"
    assert all(s.owner and s.due_in and "owner:" not in s.action for s in plan.steps)
    assert "**" not in plan.steps[0].action
    assert CHURN in plan.summary and "(8 steps)" in plan.summary
    assert plan.signals and plan.done_when
    cited = {(c.document_id, c.heading) for c in plan.citations}
    assert {c.heading for c in plan.citations} == {"When to use", "Steps", "Signals to watch", "Done when"}
    stored = {
        (r["document_id"], r["heading"])
        for r in await engine.db.pool.fetch(
            "SELECT c.document_id, c.heading FROM knowledge_chunks c"
            " JOIN knowledge_documents d ON d.id = c.document_id WHERE d.title = $1",
            CHURN,
        )
    }
    assert cited <= stored, "every citation names a real document and section"

    doc = plan.to_json()
    assert json.loads(json.dumps(doc)) == doc
    assert doc["playbook"] == {"document_id": str(plan.playbook.document_id), "title": CHURN}
    assert doc["steps"][1] == {
        "n": 2,
        "action": plan.steps[1].action,
        "owner": "CSM",
        "due_in": "within 1 business day",
    }
    assert (await engine.knowledge.plan("get well plan")).to_json() == doc, "deterministic"

    nothing = await engine.knowledge.plan("zzzz qqqq")
    assert nothing.playbook is None and nothing.steps == () and nothing.citations == ()
    assert "No document" in nothing.summary


async def test_operator_documents_are_added_found_replaced_and_deleted(engine: Engine) -> None:
    added = await engine.knowledge.add("Save desk", OPERATOR_DOC, tags=["retention offer"])
    assert added.source == "operator" and added.chunks == 2
    assert added.tags == ("retention offer", "save desk", "cancellation request")
    (top, *_) = await engine.knowledge.search("customer sent a cancellation request")
    assert (top.document_id, top.source) == (added.id, "operator")
    plan = await engine.knowledge.plan("save desk")
    assert plan.playbook is not None and plan.playbook.document_id == added.id
    assert [(s.action, s.owner, s.due_in) for s in plan.steps] == [
        ("Log the request in the save desk queue.", "Support Engineer", "within 4 hours"),
        (
            "Call the customer with a retention offer. Offer a pause before a discount.",
            "Save Desk Lead",
            "within 1 business day",
        ),
        ("Record the outcome.", None, None),
    ]
    assert plan.summary.endswith(
        "Route every written cancellation request to the save desk before anything is processed."
    )
    assert {c.heading for c in plan.citations} == {"Save desk", "Steps"}

    assert await engine.knowledge.add("Save desk", OPERATOR_DOC, tags=["retention offer"]) == added
    changed = await engine.knowledge.add("Save desk", "Just call them.", tags=["save desk"])
    assert changed.id == added.id and changed.chunks == 1 and changed.updated_at > added.updated_at
    assert (await engine.knowledge.plan("save desk")).steps == ()

    # An operator's document titled like a bundled playbook replaces it, and stays.
    mine = await engine.knowledge.add(
        PRICING, "## Steps\n\n1. Ask finance. (owner: CFO; due: today)", tags=["pricing"]
    )
    assert mine.source == "operator"
    assert await engine.knowledge.ensure_builtin() == 0
    plan = await engine.knowledge.plan("pricing")
    assert [(s.action, s.owner) for s in plan.steps] == [("Ask finance.", "CFO")]

    assert (await engine.knowledge.delete(str(added.id))).id == added.id
    assert all(p.document_id != added.id for p in await engine.knowledge.search("save desk", limit=50))
    with pytest.raises(NotFoundError) as missing:
        await engine.knowledge.delete(added.id)
    assert missing.value.code == "knowledge_not_found"
    with pytest.raises(NotFoundError):
        await engine.knowledge.delete("not-an-id")
    builtin = next(d for d in await engine.knowledge.list() if d.source == "builtin")
    with pytest.raises(ConflictError) as refused:
        await engine.knowledge.delete(builtin.id)
    assert refused.value.code == "knowledge_builtin"


async def test_workspaces_do_not_see_each_others_documents(engine: Engine) -> None:
    other = await new_workspace(engine)
    mine = await engine.knowledge.add("Save desk", OPERATOR_DOC)
    assert (await engine.knowledge.search("save desk"))[0].document_id == mine.id
    theirs = await engine.knowledge.search("save desk", limit=50, workspace_id=other)
    assert all(p.document_id != mine.id and p.source == "builtin" for p in theirs)
    listed = await engine.knowledge.list(workspace_id=other)
    assert {d.source for d in listed} == {"builtin"}
    assert not {d.id for d in listed} & {d.id for d in await engine.knowledge.list()}, "own copies"
    plan = await engine.knowledge.plan("get well plan", workspace_id=other)
    assert plan.playbook is not None and plan.playbook.document_id in {d.id for d in listed}
    with pytest.raises(NotFoundError):
        await engine.knowledge.delete(mine.id, workspace_id=other)
    with pytest.raises(NotFoundError) as unknown:
        await engine.knowledge.search("renewal", workspace_id=uuid.uuid4())
    assert unknown.value.code == "workspace_not_found"


@pytest.mark.parametrize(
    ("title", "body", "tags", "path"),
    [
        ("", "text", [], "title"),
        ("   ", "text", [], "title"),
        ("x" * 201, "text", [], "title"),
        ("a\x00b", "text", [], "title"),
        ("two\nlines", "text", [], "title"),
        ("t", "", [], "body"),
        ("t", "x" * 200_001, [], "body"),
        ("t", "nul \x00 here", [], "body"),
        ("t", "---\ntags: [a]\n---\n", [], "body"),
        ("t", "---\ntags: [a\n", [], "body"),
        ("t", "---\n- a list\n---\ntext", [], "body"),
        ("t", "text", [""], "tags[0]"),
        ("t", "text", ["x" * 81], "tags[0]"),
        ("t", "text", ["ok", "bad\x00"], "tags[1]"),
        ("t", "text", [f"tag {i}" for i in range(51)], "tags"),
    ],
)
async def test_bad_documents_are_refused_and_nothing_is_stored(
    engine: Engine, title: str, body: str, tags: list[str], path: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        await engine.knowledge.add(title, body, tags=tags)
    assert refused.value.code == "knowledge_invalid"
    assert refused.value.info.details["errors"][0]["path"] == path
    assert (
        await engine.db.pool.fetchval("SELECT count(*) FROM knowledge_documents WHERE source = 'operator'")
        == 0
    )


@pytest.mark.parametrize(
    ("scenario", "limit"), [("", 5), ("  ", 5), ("x" * 1001, 5), ("a\x00b", 5), ("ok", 0), ("ok", 51)]
)
async def test_bad_searches_are_refused(engine: Engine, scenario: str, limit: int) -> None:
    with pytest.raises(ConfigError) as refused:
        await engine.knowledge.search(scenario, limit=limit)
    assert refused.value.code == "knowledge_query_invalid"
    if limit == 5:
        with pytest.raises(ConfigError):
            await engine.knowledge.plan(scenario)


class BagOfWords:
    """A deterministic local embedder: words hashed into 64 dimensions.

    ``MEANING`` stands in for what a real model knows: a few words it treats as the same idea.
    """

    MEANING: ClassVar[dict[str, str]] = {"ditching": "churn", "rival": "churn", "quitting": "churn"}
    STOP = frozenset(
        {"the", "and", "for", "are", "our", "with", "that", "this", "they", "them", "from", "but"}
    )

    def __init__(self, dimensions: int = 64) -> None:
        self.dimensions = dimensions
        self.texts = 0

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts += len(texts)
        vectors = []
        for text in texts:
            vector = [0.0] * self.dimensions
            for word in re.findall(r"[a-z]+", text.lower()):
                if len(word) > 2 and word not in self.STOP:
                    word = self.MEANING.get(word, word)
                    vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimensions] += 1.0
            vectors.append(vector)
        return vectors


async def vectors_available(engine: Engine) -> bool:
    return bool(
        await engine.db.pool.fetchval(
            "SELECT EXISTS (SELECT 1 FROM information_schema.columns"
            " WHERE table_name = 'knowledge_chunks' AND column_name = 'embedding')"
        )
    )


async def test_a_local_embedder_ranks_a_paraphrase_through_pgvector(engine: Engine) -> None:
    if not await vectors_available(engine):
        pytest.skip("this server has no pgvector")
    paraphrase = "they are thinking of ditching us for a rival"
    assert await engine.knowledge.search(paraphrase) == [], "no word of it is in any playbook"
    embedder = BagOfWords()
    passages = await engine.knowledge.search(paraphrase, embedder=embedder)
    assert passages[0].title == CHURN and 0 < passages[0].score <= 1
    counts = await engine.db.pool.fetchrow(
        "SELECT count(*) AS chunks, count(embedding) AS embedded,"
        " count(*) FILTER (WHERE vector_dims(embedding) = 64) AS dims64 FROM knowledge_chunks"
    )
    assert counts["chunks"] == counts["embedded"] == counts["dims64"] == embedder.texts - 1
    plan = await engine.knowledge.plan(paraphrase, embedder=embedder)
    assert plan.playbook is not None and plan.playbook.title == CHURN and len(plan.steps) == 8
    assert embedder.texts == counts["chunks"] + 2, "chunks are embedded once; each search embeds its query"

    # Words still lead when they match: a tag outweighs a similarity.
    assert (await engine.knowledge.search("pricing", embedder=embedder))[0].title == PRICING
    # A new document is embedded by the next search; another dimension means re-embedding.
    await engine.knowledge.add("Save desk", OPERATOR_DOC)
    await engine.knowledge.search("quitting", embedder=BagOfWords(32))
    assert (
        await engine.db.pool.fetchval(
            "SELECT count(*) FROM knowledge_chunks WHERE embedding IS NULL OR vector_dims(embedding) <> 32"
        )
        == 0
    )


class Broken:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return self.answer


@pytest.mark.parametrize("answer", [[], [[]], [[1.0, float("nan")]], [["x"]], [[1.0], [2.0]]])
async def test_a_broken_embedder_is_refused(engine: Engine, answer: Any) -> None:
    if not await vectors_available(engine):
        pytest.skip("this server has no pgvector")
    with pytest.raises(ConfigError) as refused:
        await engine.knowledge.search("renewal", embedder=Broken(answer))
    assert refused.value.code == "embedder_invalid"


def _id(documents: list[Any], title: str) -> UUID:
    return next(d.id for d in documents if d.title == title)
