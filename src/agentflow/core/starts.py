"""What a manual start asks for, checked, and its fingerprint for idempotent starts.

A start that names an idempotency key (seed 003 ``createIfAbsent``) makes at most one run
per workflow and key; a later start with the key gets that run back when it asked for the
same thing (the same fingerprint) and a conflict when it asked for something else.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.errors import ConfigError
from agentflow.core.payload_format import payload_errors

MAX_KEY = 255


def check_payload(config: StructuredConfig | AgentConfig, payload: Any) -> None:
    """Refuse a payload that does not match the workflow's ``payload_format``.

    Raises:
        ConfigError: ``payload_invalid``, listing each field.
    """
    if not config.payload_format:
        return
    problems = payload_errors(config.payload_format, {} if payload is None else payload)
    if problems:
        raise ConfigError(
            "payload_invalid",
            f"the payload does not match {config.name!r}'s payload_format at {problems[0]['path']}:"
            f" {problems[0]['message']}",
            details={"errors": problems},
            solution="Send the fields the workflow's payload_format declares.",
        )


def check_key(key: str) -> str:
    """An idempotency key as given, when it is one.

    Raises:
        ConfigError: ``idempotency_key_invalid`` for an empty, too long or unprintable key.
    """
    if not 1 <= len(key) <= MAX_KEY or not key.isprintable():
        raise ConfigError(
            "idempotency_key_invalid",
            f"an idempotency key is 1 to {MAX_KEY} printable characters; got {len(key)} characters",
            solution="Send a short unique string per start, such as a UUID.",
        )
    return key


def fingerprint(**asked: Any) -> str:
    """A hash of what a start asked for (its payload, state, version, key, node, inputs)."""
    text = json.dumps(asked, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
