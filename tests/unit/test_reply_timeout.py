"""How long an engine connection waits for a reply (``Settings.reply_timeout``), and how a
database error reads in a log line (``database.describe``)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentflow.settings import Settings
from agentflow.store.database import describe


def test_the_reply_timeout_follows_the_statement_timeout_unless_set() -> None:
    assert Settings(statement_timeout=30).reply_timeout == 35
    assert Settings(statement_timeout=2).reply_timeout == 7
    assert Settings(statement_timeout=2, client_timeout=3).reply_timeout == 3


@pytest.mark.parametrize("client_timeout", [1.0, 2.0])
def test_a_client_timeout_within_the_statement_timeout_is_refused_with_what_to_do(
    client_timeout: float,
) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(statement_timeout=2, client_timeout=client_timeout)
    message = str(caught.value)
    assert "client_timeout" in message
    assert f"{client_timeout:g} s must exceed AGENTFLOW_STATEMENT_TIMEOUT (2 s)" in message
    assert "unset it" in message


def test_a_client_timeout_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLOW_CLIENT_TIMEOUT", "45")
    assert Settings().reply_timeout == 45


def test_a_database_error_names_its_type_even_without_a_message() -> None:
    assert describe(TimeoutError()) == "TimeoutError"
    assert describe(ConnectionResetError("reset by peer")) == "ConnectionResetError: reset by peer"
