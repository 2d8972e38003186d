"""The knowledge base behind the agent tool ``generate_plan(scenario)``.

Customer-success playbooks (bundled in ``playbooks/`` and added by operators) stored per
workspace, searched by full text and optionally by embedding, and turned into plans with
citations. The engine attaches one as ``engine.knowledge``.
"""

from agentflow.knowledge.base import KnowledgeBase
from agentflow.knowledge.embedding import Embedder
from agentflow.knowledge.passages import Passage
from agentflow.knowledge.plans import Citation, Plan, PlanStep
from agentflow.store.knowledge import DocumentRecord as KnowledgeDocument

__all__ = ["Citation", "Embedder", "KnowledgeBase", "KnowledgeDocument", "Passage", "Plan", "PlanStep"]
