"""What a held agent run's worker keeps between decisions, and values as jsonb stores them."""

from __future__ import annotations

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


def test_a_value_as_stored_has_jsonb_key_order_and_json_types() -> None:
    value = {"usage": {"bb": 1, "a": 2}, "content": ("x", "y"), "é": 1, "z": [{"ccc": 1, "dd": 2}]}
    stored = json_codec.as_stored(value)
    assert list(stored) == ["z", "é", "usage", "content"]  # by UTF-8 length, then bytes
    assert list(stored["usage"]) == ["a", "bb"] and list(stored["z"][0]) == ["dd", "ccc"]
    assert stored["content"] == ["x", "y"]
    with pytest.raises(json_codec.UnstorableJson):
        json_codec.as_stored({"text": "\x00"})
