"""Retrieval by meaning offline: the bundled playbooks, the local model, pgvector, real PostgreSQL.

Each scenario below paraphrases one playbook without any of its words (checked against the
playbook's title, tags and text, stemmed as full-text search stems them). Keyword search alone
cannot put that playbook first; the local all-MiniLM-L6-v2 embeddings (``AGENTFLOW_EMBEDDINGS
=local``) must.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from agentflow.engine import Engine
from agentflow.knowledge import KnowledgeBase
from agentflow.llm.base import ModelError
from agentflow.llm.local_embedder import DIMENSIONS, LocalEmbedder
from tests.conftest import make_settings
from tests.support.agents import agent_workflow, calls, replies, running_worker, until

CHURN = "Get-well plan for an account at risk of churn"
EXPANSION = "Expansion when an account reaches its license limits"
ADOPTION = "Driving adoption when product usage is low"
ONBOARDING = "Onboarding a new customer"
ESCALATION = "Handling a customer escalation"
PRICING = "Responding to pricing concerns"
MEETING = "Turning meeting action items into tasks"

# (scenario, the playbook it means). None shares a word with that playbook; some share words
# with another one, which keyword search then puts first.
PARAPHRASES = [
    ("this client may abandon us soon", CHURN),
    ("they are thinking of quitting us", CHURN),
    ("room for more folks", EXPANSION),
    ("hardly anybody touches the software", ADOPTION),
    ("a freshly acquired client", ONBOARDING),
    ("write up the to-dos from today's conversation", MEETING),
    ("the client thinks we are overpriced", PRICING),
    ("the client's CEO is furious about the system going down", ESCALATION),
]

# The stemmed words of a scenario that occur in a document's title, tags or text.
SHARED_WORDS = """
SELECT array(
    SELECT unnest(tsvector_to_array(to_tsvector('english', $2)))
    INTERSECT
    SELECT unnest(tsvector_to_array(to_tsvector('english',
        d.title || ' ' || array_to_string(d.tags, ' ') || ' ' || d.body)))
)
FROM knowledge_documents d WHERE d.workspace_id = $1 AND d.title = $3
"""


@pytest.fixture
async def local_engine(database_url: str) -> AsyncIterator[Engine]:
    """An engine on the test's database configured with ``AGENTFLOW_EMBEDDINGS=local``."""
    eng = await Engine.connect(make_settings(database_url, embeddings="local"), migrate_schema=False)
    yield eng
    await eng.close()


async def test_paraphrases_find_their_playbook_by_meaning_where_keywords_do_not(
    engine: Engine, local_engine: Engine
) -> None:
    keywords, meaning = engine.knowledge, local_engine.knowledge
    assert keywords.embedder is None, "the default: no embedder of its own"
    assert isinstance(meaning.embedder, LocalEmbedder)
    await keywords.ensure_builtin()
    workspace = (await keywords.list())[0].workspace_id

    for scenario, title in PARAPHRASES:
        shared = await engine.db.pool.fetchval(SHARED_WORDS, workspace, scenario, title)
        assert shared == [], f"{scenario!r} shares {shared} with {title!r}"

        by_keywords = await keywords.search(scenario)
        assert not by_keywords or by_keywords[0].title != title, f"keywords found {scenario!r}"

        by_meaning = await meaning.search(scenario, limit=3)
        assert by_meaning[0].title == title, (scenario, [(p.title, p.score) for p in by_meaning])
        assert 0 < by_meaning[0].score <= 1
        plan = await meaning.plan(scenario)
        assert plan.playbook is not None and plan.playbook.title == title and len(plan.steps) >= 5

    # Every chunk was embedded once, with 384 dimensions; the searches after it embedded
    # only their scenario.
    counts = await engine.db.pool.fetchrow(
        "SELECT count(*) AS chunks, count(*) FILTER (WHERE vector_dims(embedding) = $1) AS local"
        " FROM knowledge_chunks",
        DIMENSIONS,
    )
    assert counts["chunks"] == counts["local"] > 0

    # Words still lead when they match: a scenario naming a playbook's tags stays with it.
    assert (await meaning.search("pricing"))[0].title == PRICING
    assert (await meaning.search("renewal"))[0].title == "Preparing and closing a renewal"


async def test_generate_plan_ranks_by_meaning_offline_on_the_scripted_model(local_engine: Engine) -> None:
    scenario, title = "a freshly acquired client", ONBOARDING
    model = replies(calls(("generate_plan", {"scenario": scenario})))
    await local_engine.publish_workflow(agent_workflow())
    async with running_worker(local_engine, model=model):
        run = await local_engine.start_run("meeting-follow-up", {"note": "manual"})
        done = await until(local_engine, run.id, lambda r: r.status.is_terminal, timeout=60)
    assert done.status == "completed", done.error
    plan = done.state["agent"]["plan"]
    assert plan["scenario"] == scenario and plan["playbook"]["title"] == title
    assert plan["steps"] and plan["citations"]


class Counting:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls = 0

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return [[1.0, 0.0]] * len(texts)


async def test_the_knowledge_base_embedder_wins_and_its_failures_fall_back_to_keywords(
    engine: Engine, local_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    assert isinstance(KnowledgeBase(local_engine.db).embedder, LocalEmbedder), "as configured"
    # One set of vectors: a caller's embedder (the workflow's provider) is not used when the
    # knowledge base has its own.
    ours, theirs = Counting(), Counting()
    await KnowledgeBase(engine.db, embedder=ours).search("renewal", embedder=theirs)
    assert ours.calls > 0 and theirs.calls == 0

    # Its own embedder failing leaves keyword search.
    failing = Counting(ModelError("model_unavailable", "no model"))
    broken = KnowledgeBase(engine.db, embedder=failing)
    with caplog.at_level(logging.WARNING, logger="agentflow.knowledge.base"):
        passages = await broken.search("pricing concerns")
    assert passages[0].title == PRICING and failing.calls == 1
    assert "searching by keywords only" in caplog.text
    assert await broken.search("a freshly acquired client") == [], "no word of it in any playbook"

    # A caller's failing embedder still raises, as before (generate_plan then retries without).
    with pytest.raises(ModelError):
        await engine.knowledge.search("renewal", embedder=Counting(ModelError("model_unavailable", "down")))
