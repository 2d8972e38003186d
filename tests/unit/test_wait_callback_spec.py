"""The ``wait_callback`` node's spec: its ports by timeout action, and what a row keeps of a token."""

from __future__ import annotations

import hashlib

from agentflow.core.graph.callback_nodes import WaitCallbackNode
from agentflow.core.link_tokens import new_token, token_hash


def test_the_timeout_port_exists_only_when_the_timeout_continues() -> None:
    assert WaitCallbackNode(id="w").output_ports() == ("result", "error")
    assert WaitCallbackNode(id="w", timeout_action="continue").output_ports() == (
        "result",
        "timeout",
        "error",
    )


def test_a_templated_notify_url_is_checked_when_the_step_runs_not_at_publish() -> None:
    node = WaitCallbackNode(id="w", notify="{{ payload.hook }}", data={"order": "{{ payload.id }}"})
    assert node.notify == "{{ payload.hook }}"


def test_a_row_keeps_the_tokens_sha256_not_the_token() -> None:
    assert token_hash("abc") == hashlib.sha256(b"abc").hexdigest() != "abc"


def test_link_tokens_are_fresh_and_long() -> None:
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100 and min(len(t) for t in tokens) >= 43
