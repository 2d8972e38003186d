"""Run search filters as query parameters: every one known and checked, none ignored."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from uuid import uuid4

import pytest

from agentflow.core.conversations import check_conversation
from agentflow.core.errors import ConfigError
from agentflow.core.run_filters import Range, RunFilter, parse_run_filter


def test_every_filter_is_read() -> None:
    run, parent, loop, before, workflow = uuid4(), uuid4(), uuid4(), uuid4(), uuid4()
    wanted = parse_run_filter(
        [
            ("status", "completed"), ("run_id", str(run)), ("workflow_id", str(workflow)), ("version", "3"),
            ("trigger", "manual"), ("enrollment_key", "k"), ("account_id", "acme"), ("parent_run_id", str(parent)),
            ("state[tier]", "gold"), ("started[gte]", "2026-11-25T10:00:00+00:00"), ("usd[lt]", "0.5"),
            ("duration[gt]", "100"), ("loop_of", str(loop)), ("limit", "20"), ("before", str(before)),
            ("exclude", "state, steps"), ("conversation_id", "C-1"), ("channel", "slack"),
        ]
    )  # fmt: skip
    assert wanted.exact == {
        "status": "completed", "run_id": run, "workflow_id": workflow, "version": 3, "trigger": "manual",
        "enrollment_key": "k", "account_id": "acme", "parent_run_id": parent, "conversation_id": "C-1",
        "channel": "slack",
    }  # fmt: skip
    assert wanted.state == {"tier": "gold"}
    assert wanted.ranges == (
        Range("started", "gte", datetime(2026, 11, 25, 10, tzinfo=UTC)),
        Range("usd", "lt", Decimal("0.5")),
        Range("duration", "gt", Decimal("100")),
    )
    assert (wanted.loop_of, wanted.limit, wanted.before, wanted.exclude_state) == (loop, 20, before, True)
    assert parse_run_filter([]) == RunFilter()


@pytest.mark.parametrize(
    ("params", "named", "says"),
    [
        ([("stauts", "completed")], "stauts", "run lists take no query parameter 'stauts'"),
        ([("started[between]", "x")], "started[between]", "no query parameter"),
        ([("colour[gte]", "1")], "colour[gte]", "no query parameter"),
    ],
)
def test_an_unknown_parameter_is_named(params: list[tuple[str, str]], named: str, says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_run_filter(params)
    assert (
        refused.value.code == "query_parameter_unknown" and refused.value.info.details["parameter"] == named
    )
    assert says in refused.value.info.message and "status" in refused.value.info.details["known"]


def test_a_workflows_own_list_takes_no_workflow_id() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_run_filter([("workflow_id", str(uuid4()))], with_workflow=False)
    assert refused.value.code == "query_parameter_unknown"
    assert "workflow_id" not in refused.value.info.details["known"]


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("status", "done", "one of created"),
        ("run_id", "nope", "UUID"),
        ("version", "0", "whole number from 1"),
        ("version", "1e3", "whole number"),
        ("limit", "501", "from 1 to 500"),
        ("trigger", "cron", "one of event"),
        ("started[gte]", "yesterday", "ISO 8601"),
        ("ended[lt]", "2026-11-25T10:00:00", "with its offset"),
        ("tokens[gte]", "many", "a number"),
        ("usd[lte]", "NaN", "a finite number"),
        ("exclude", "state,output", "state, steps"),
        ("before", "x", "UUID"),
    ],
)
def test_a_malformed_value_is_named_with_what_was_expected(name: str, value: str, expected: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_run_filter([(name, value)])
    assert refused.value.code == "query_parameter_invalid" and refused.value.info.details["parameter"] == name
    assert expected in refused.value.info.message


def test_a_parameter_given_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="given twice"):
        parse_run_filter([("status", "completed"), ("status", "failed")])


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ("T-1", "conversation"),
        ({"channel": "slack"}, "conversation.id"),
        ({"id": "T-1"}, "conversation.channel"),
        ({"id": "T-1", "channel": "Slack"}, "conversation.channel"),
        ({"id": "", "channel": "slack"}, "conversation.id"),
        ({"id": "T-1", "channel": "slack", "title": "x" * 301}, "conversation.title"),
        ({"id": "T-1", "channel": "slack", "who": "lee"}, "conversation.who"),
        ({"id": "T\x001", "channel": "slack"}, "conversation.id"),
    ],
)
def test_a_conversation_is_checked_field_by_field(given: object, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_conversation(given)
    assert info.value.code == "conversation_invalid" and info.value.info.details["field"] == field


def test_a_good_conversation_is_kept_as_given() -> None:
    assert check_conversation({"id": "T-1", "channel": "zendesk"}) == {"id": "T-1", "channel": "zendesk"}
    assert check_conversation({"id": "T-1", "channel": "web", "title": "Hi"})["title"] == "Hi"
    assert check_conversation(None) is None
