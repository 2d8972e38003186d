"""What a manual start asks for, checked, and its fingerprint for idempotent starts.

A start that names an idempotency key (seed 003 ``createIfAbsent``) makes at most one run
per workflow and key; a later start with the key gets that run back when it asked for the
same thing (the same fingerprint) and a conflict when it asked for something else.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.errors import ConfigError
from agentflow.core.payload_format import payload_errors

MAX_KEY = 255
CHANNEL = re.compile(r"[a-z0-9][a-z0-9_.-]{0,49}")
"""A conversation's channel: ``slack``, ``email``, ``web``, ``zendesk``, ``whatsapp`` ..."""
_CONVERSATION_FIELDS = {"id": 200, "channel": 50, "title": 300}


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


def check_conversation(conversation: Any) -> dict[str, str] | None:
    """The conversation a run answers, checked: ``{id, channel}`` and an optional ``title``.

    Raises:
        ConfigError: ``conversation_invalid`` naming the field.
    """
    if conversation is None:
        return None
    if not isinstance(conversation, dict):
        raise _conversation_invalid("conversation", "an object {id, channel, title}")
    unknown = sorted(set(conversation) - set(_CONVERSATION_FIELDS))
    if unknown:
        raise _conversation_invalid(
            f"conversation.{unknown[0]}", "absent: a conversation has id, channel, title"
        )
    checked: dict[str, str] = {}
    for name, longest in _CONVERSATION_FIELDS.items():
        value = conversation.get(name)
        if value is None and name == "title":
            continue
        if not isinstance(value, str) or not 1 <= len(value) <= longest or not value.isprintable():
            raise _conversation_invalid(f"conversation.{name}", f"1 to {longest} printable characters")
        checked[name] = value
    if not CHANNEL.fullmatch(checked["channel"]):
        raise _conversation_invalid("conversation.channel", "lower case letters, digits, _ . - (e.g. slack)")
    return checked


def _conversation_invalid(field: str, expected: str) -> ConfigError:
    return ConfigError(
        "conversation_invalid",
        f"{field} must be {expected}",
        details={"field": field},
        solution='Send conversation as {"id": "...", "channel": "slack", "title": "..."}.',
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
