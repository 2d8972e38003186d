"""Pure parts of lifecycle events and people: which events a checkpoint publishes, and how a
person's fields are checked."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from agentflow.core.errors import ConfigError
from agentflow.core.lifecycle import lifecycle_events, started_by_lifecycle
from agentflow.core.link_tokens import holder, read_holder
from agentflow.core.people import check_person, role_of
from agentflow.core.records import RunRecord

NOW = datetime(2026, 11, 27, tzinfo=UTC)


def run(**extra: Any) -> RunRecord:
    fields: dict[str, Any] = {
        "workspace_id": uuid.uuid4(), "id": uuid.uuid4(), "workflow_id": uuid.uuid4(), "workflow_version": 1,
        "status": "in_progress", "status_reason": None, "enrollment_key": None, "input": {}, "state": {},
        "output": None, "error": None, "step_seq": 0, "attempt": 0, "rescues": 0, "due_at": None,
        "lease_owner": "w", "lease_expires_at": None, "fencing_token": 1, "cancel_requested": False,
        "parent_run_id": None, "input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0,
        "usd_cost": Decimal(0), "created_at": NOW, "started_at": NOW, "updated_at": NOW,
        "completed_at": None, "canceled_at": None,
    }  # fmt: skip
    return RunRecord(**{**fields, **extra})


def step(seq: int = 0, status: str = "completed", attempt: int = 1) -> dict[str, Any]:
    return {"seq": seq, "attempt": attempt, "node_id": "a", "kind": "tool", "status": status, "error": None}


def topics(events: list[dict[str, Any]]) -> list[str]:
    return [e["topic"] for e in events]


def test_a_first_step_that_ends_the_run_tells_its_start_and_end() -> None:
    events = lifecycle_events(run(), status="completed", reason=None, error=None, step=step(), request=None)
    assert topics(events) == ["run.started", "run.completed"]
    assert events[0]["message_id"] == events[1]["message_id"]  # both keyed by the run: once each


def test_a_failed_attempt_and_a_failed_run_are_keyed_by_step_and_attempt() -> None:
    r = run()
    retried = lifecycle_events(
        r, status="waiting", reason="retry", error=None, step=step(3, "failed"), request=None
    )
    failed = lifecycle_events(
        r, status="failed", reason="step_failed", error={"code": "x"}, step=step(3, "failed", 2), request=None
    )
    assert topics(retried) == ["step.failed"] and retried[0]["message_id"] == f"{r.id}:3:1"
    assert retried[0]["data"]["run_status"] == "waiting"
    assert topics(failed) == ["step.failed", "run.failed"] and failed[1]["message_id"] == f"{r.id}:3"
    assert failed[1]["data"]["error"] == {"code": "x"}


def test_a_request_is_told_by_its_id_and_a_run_started_by_a_lifecycle_event_tells_nothing() -> None:
    asked = {"id": "req-1", "kind": "input", "node_id": "ask"}
    events = lifecycle_events(run(), status="waiting", reason=None, error=None, step=step(2), request=asked)
    assert events == [
        {"topic": "request.created", "message_id": "req-1", "data": {**events[0]["data"], "kind": "input"}}
    ]
    alerting = run(trigger={"source": "event", "event": {"topic": "run.failed"}})
    assert started_by_lifecycle(alerting) and not started_by_lifecycle(run(trigger={"source": "manual"}))
    assert (
        lifecycle_events(alerting, status="failed", reason=None, error=None, step=step(), request=None) == []
    )


def test_a_person_is_checked_field_by_field() -> None:
    assert check_person("lee", {"name": "Lee", "email": "lee@example.com", "roles": ["ops", "finance", "ops"]}) == (
        "Lee", "lee@example.com", ["finance", "ops"],
    )  # fmt: skip
    with pytest.raises(ConfigError) as bad:
        check_person("Lee!", {"name": "", "email": "x", "roles": "ops", "boss": 1})
    paths = sorted(e["path"] for e in bad.value.info.details["errors"])
    assert paths == ["boss", "email", "handle", "name", "roles"]
    with pytest.raises(ConfigError, match="roles"):
        check_person("lee", {"roles": [f"r{i}" for i in range(21)]})
    assert role_of("role:finance") == "finance" and role_of("lee") is None


def test_a_link_holder_names_its_channel_and_whom() -> None:
    assert read_holder(holder("email", "lee@example.com")) == ("email", "lee@example.com")
    assert read_holder(holder("webhook", "https://ops.example.com:8443/x")) == (
        "webhook",
        "https://ops.example.com:8443/x",
    )
