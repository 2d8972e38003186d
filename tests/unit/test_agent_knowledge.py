"""What a held agent run's worker keeps between decisions, and values as jsonb stores them."""

from __future__ import annotations

import orjson
import pytest

from agentflow.core.agent_context import HistoryStep
from agentflow.core.agent_knowledge import AgentKnowledge
from agentflow.store import json_codec

KNOWN = AgentKnowledge((), (), {"id": "acme"}, account_read_at=100.0)


def test_only_completed_agent_steps_join_the_history() -> None:
    decide = HistoryStep(0, "agent.decide", "scripted", {}, {})
    known = KNOWN.with_step(decide, "completed")
    assert known.history == (decide,)
    assert known.with_step(HistoryStep(1, "agent.tool", "x", {}, None), "failed") is known
    assert known.with_step(HistoryStep(1, "tool", "x", {}, None), "completed") is known


def test_created_tasks_join_known_tasks_and_a_delivery_forgets_them() -> None:
    known = KNOWN.with_tasks([{"title": "a"}]).with_tasks([{"title": "b"}])
    assert known.tasks == ({"title": "a"}, {"title": "b"})
    forgotten = known.without_tasks()
    assert forgotten.tasks is None
    assert forgotten.with_tasks([{"title": "c"}]).tasks is None, "unknown tasks stay unknown"
    assert forgotten.without_tasks() is forgotten
    assert known.with_tasks([]) is known


def test_an_account_read_stands_for_a_moment() -> None:
    assert KNOWN.account_fresh(100.9, 1.0)
    assert not KNOWN.account_fresh(101.1, 1.0)


def test_a_canonical_value_has_sorted_keys_and_json_types_whatever_order_it_came_in() -> None:
    written = {"usage": {"bb": 1, "a": 2}, "content": ("x", "y"), "z": [{"ccc": 1, "dd": 2}], 3: "n"}
    stored = {"z": [{"dd": 2, "ccc": 1}], "3": "n", "usage": {"a": 2, "bb": 1}, "content": ["x", "y"]}
    canonical = json_codec.canonical(written)
    assert list(canonical) == ["3", "content", "usage", "z"]
    assert list(canonical["usage"]) == ["a", "bb"] and list(canonical["z"][0]) == ["ccc", "dd"]
    assert canonical["content"] == ["x", "y"]
    assert orjson.dumps(canonical) == orjson.dumps(json_codec.canonical(stored))
    with pytest.raises(json_codec.UnstorableJson):
        json_codec.canonical({"when": object()})
