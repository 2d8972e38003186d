"""Pure decisions about task changes, waits for events and the inbox template variable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest

from agentflow.core import planner
from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ConfigError, ConflictError
from agentflow.core.inbox import AWAITING_EVENT, Inbox, InboxItem
from agentflow.core.step_results import NodeResult
from agentflow.core.tasks import apply_change, event_message_id, event_topic, parse_change, parse_query

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def stored(**fields: Any) -> dict[str, Any]:
    base = {
        "title": "Call Acme",
        "description": None,
        "assignee": "ada",
        "due_at": NOW,
        "priority": "high",
        "status": "open",
        "metadata": {"crm": "T-1"},
        "revision": 4,
    }
    return {**base, **fields}


def test_a_change_lists_only_what_differs_as_json() -> None:
    change = parse_change({"assignee": "bo", "priority": "high", "due_at": "2026-03-01T10:00:00+01:00"})
    applied = apply_change(stored(), change)
    assert applied.changes == {"assignee": {"old": "ada", "new": "bo"}}, "same instant, same priority"
    assert applied.values["assignee"] == "bo" and applied.values["title"] == "Call Acme"


def test_null_clears_and_metadata_merges() -> None:
    applied = apply_change(stored(), parse_change({"due_at": None, "metadata": {"crm": None, "x": [1]}}))
    assert applied.changes == {
        "due_at": {"old": NOW.isoformat(), "new": None},
        "metadata": {"old": {"crm": "T-1"}, "new": {"x": [1]}},
    }


def test_nothing_to_change_is_empty() -> None:
    for change in ({}, {"status": "open"}, {"metadata": {"crm": "T-1"}}, {"metadata": {"gone": None}}):
        assert apply_change(stored(), parse_change(change)).changes == {}, change


def test_expected_revision_must_match() -> None:
    assert apply_change(stored(), parse_change({"title": "x", "expected_revision": 4})).changes
    with pytest.raises(ConflictError) as caught:
        apply_change(stored(), parse_change({"title": "x", "expected_revision": 3}))
    assert caught.value.code == "task_revision_conflict"


@pytest.mark.parametrize(
    ("status", "topic"),
    [("completed", "task.completed"), ("canceled", "task.canceled"), ("in_progress", "task.updated")],
)
def test_the_topic_names_a_completion_or_cancellation(status: str, topic: str) -> None:
    assert event_topic(apply_change(stored(), parse_change({"status": status})).changes) == topic
    assert event_topic({"title": {"old": "a", "new": "b"}}) == "task.updated"


def test_message_ids_are_one_per_revision() -> None:
    task_id = uuid4()
    assert event_message_id(task_id, 3) == f"task:{task_id}:3"


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"status": "done"}, "status"),
        ({"title": None}, "title"),
        ({"metadata": None}, "metadata"),
        ({"metadata": {"k": "\x00"}}, "metadata"),
        ({"metadata": {"k": "x" * 70_000}}, "metadata"),
        ({"description": "\ud800"}, "description"),
        ({"due_at": "2026-03-01T09:00:00"}, "due_at"),
        ({"nope": 1}, "nope"),
    ],
)
def test_invalid_changes_name_their_field(change: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_change(change)
    assert caught.value.code == "task_invalid"
    assert caught.value.info.details["errors"][0]["path"] == path


def test_query_filters_are_checked() -> None:
    assert parse_query(status="open", limit=5).limit == 5
    with pytest.raises(ConfigError) as caught:
        parse_query(due_after=datetime(2026, 1, 1), limit=501)
    assert caught.value.code == "task_query_invalid"


def config() -> StructuredConfig:
    c = validate_config(
        {
            "name": "w",
            "kind": "structured",
            "nodes": [
                {"id": "w", "type": "wait", "duration": "1d", "wake_on_event": True},
                {"id": "b", "type": "finish"},
            ],
        }
    )
    assert isinstance(c, StructuredConfig)
    return c


def test_a_wait_for_an_event_waits_with_the_reason_deliveries_wake() -> None:
    c = config()
    result = NodeResult(None, wake_after=timedelta(days=1), wake_on_event=True, passes_inbox=True)
    t = planner.on_success(c, {"node": "w"}, c.node("w"), result)
    assert t.reason == AWAITING_EVENT == "awaiting_event"
    plain = planner.on_success(c, {"node": "w"}, c.node("w"), NodeResult(None, wake_after=timedelta(days=1)))
    assert plain.reason == "timer"


def test_wake_on_event_still_needs_a_limit() -> None:
    with pytest.raises(ConfigError):
        validate_config(
            {"name": "w", "kind": "structured", "nodes": [{"id": "w", "type": "wait", "wake_on_event": True}]}
        )


def test_the_inbox_template_variable() -> None:
    inbox = Inbox(7, (InboxItem(3, "task", {"topic": "task.completed"}, NOW),))
    assert inbox.view() == [
        {"kind": "task", "payload": {"topic": "task.completed"}, "created_at": NOW.isoformat()}
    ]
    assert inbox.ids == (3,)
    assert inbox.consumed() == Inbox(7, ())
