"""Identifiers: a reference is a UUID or a name."""

from __future__ import annotations

from uuid import UUID

from agentflow.core.ids import DEFAULT_WORKSPACE, as_uuid


def test_a_reference_is_a_uuid_or_not() -> None:
    assert as_uuid(DEFAULT_WORKSPACE) is DEFAULT_WORKSPACE
    assert as_uuid(str(DEFAULT_WORKSPACE)) == DEFAULT_WORKSPACE
    assert as_uuid("00000000000000000000000000000001") == UUID(int=1)
    assert as_uuid("triage-tickets") is None
    assert as_uuid("") is None
