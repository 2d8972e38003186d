"""Pure parts of triggers: debounce keys and windows' config, sources, access keys, sealing."""

from __future__ import annotations

import base64
import re
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from agentflow.core.access_keys import (
    NAME_PATTERN,
    generate_key,
    hash_secret,
    name_is_valid,
    parse_key,
    secret_matches,
)
from agentflow.core.errors import ConfigError
from agentflow.core.sealing import SealBroken, new_sealing_key, parse_sealing_key, seal, unseal
from agentflow.core.sources import TopicPatterns, source_of, source_topics, topic_matches
from agentflow.core.triggers import Debounce, Gate, Trigger, debounce_key


def test_debounce_parses_durations_and_checks_bounds() -> None:
    d = Debounce.model_validate({"seconds": "1m", "max_wait": "10m", "key": "ticket.id"})
    assert (d.seconds, d.max_wait) == (60.0, timedelta(minutes=10))
    with pytest.raises(ValidationError, match="max_wait must be at least"):
        Debounce.model_validate({"seconds": 30, "max_wait": "5s"})
    for bad in (0, -1, "2d"):
        with pytest.raises(ValidationError):
            Debounce.model_validate({"seconds": bad})
    with pytest.raises(ValidationError, match="invalid path"):
        Debounce.model_validate({"seconds": 1, "key": "a..b"})


def test_debounce_key_reads_dot_paths_with_the_flat_key_fallback() -> None:
    d = Debounce(seconds=5, key="customer.id")
    assert debounce_key(d, {"customer": {"id": "c-1"}}, None) == "c-1"
    assert debounce_key(d, {"customer.id": "flat"}, None) == "flat", "seed 002's flat-key fallback"
    assert debounce_key(d, {"customer": {"id": 7}}, None) == "7"
    assert debounce_key(d, {"customer": {"id": True}}, None) == "true"
    # No usable key: the event is not debounced (handled at once).
    for payload in ({}, {"customer": {}}, {"customer": {"id": None}}, {"customer": {"id": {"x": 1}}},
                    {"customer": {"id": ""}}, {"customer": {"id": "x" * 501}}):  # fmt: skip
        assert debounce_key(d, payload, "enrolled") is None, payload


def test_debounce_without_a_key_uses_the_enrollment_key_or_one_window() -> None:
    d = Debounce(seconds=5)
    assert debounce_key(d, {"a": 1}, "acct-1") == "acct-1"
    assert debounce_key(d, {"a": 1}, None) == ""


def test_a_trigger_without_topics_is_for_webhooks_only() -> None:
    trigger = Trigger.model_validate({"mode": "restart", "debounce": {"seconds": 2}})
    assert trigger.topics == [] and not trigger.matches_topic("anything")
    assert Gate.model_validate({}).on_error == "skip"
    with pytest.raises(ValidationError):
        Gate.model_validate({"on_error": "explode"})


def test_sources_are_topic_prefixes() -> None:
    assert source_topics(["email", "signal"]) == ["email.*", "signal.*"]
    assert source_of("ticket.updated") == "ticket" and source_of("plain") == "plain"
    assert topic_matches(source_topics(["email"]), "email.received")
    assert not topic_matches(source_topics(["email"]), "emails.received")
    assert not topic_matches(source_topics(["email"]), "email"), "a bare source name is not one of its events"


_PATTERN_PARTS = st.sampled_from(["email", "run", ".", "*", "?", "[ab]", "[!a]", "completed", "_", "a"])
_TOPIC_PARTS = st.sampled_from(["email", "run", ".", "completed", "started", "a", "b", "_", "[", "x"])


@given(
    st.lists(st.lists(_PATTERN_PARTS, min_size=1, max_size=4).map("".join), max_size=6),
    st.lists(st.lists(_TOPIC_PARTS, min_size=1, max_size=5).map("".join), min_size=1, max_size=6),
)
def test_compiled_topic_patterns_answer_as_each_pattern_tried(patterns: list[str], topics: list[str]) -> None:
    compiled = TopicPatterns(patterns)
    for topic in topics * 2:  # the second time from what it remembered
        assert compiled.matches(topic) == topic_matches(patterns, topic), (patterns, topic)


def test_compiled_topic_patterns_remember_a_bounded_number_of_topics() -> None:
    compiled = TopicPatterns(["run.*", "email.received"])
    assert compiled.patterns == ("run.*", "email.received")
    assert compiled.matches("run.completed") and compiled.matches("email.received")
    assert not compiled.matches("email.sent") and not compiled.matches("runs.completed")
    assert not TopicPatterns([]).matches("run.completed"), "no pattern hears nothing"
    for index in range(TopicPatterns.REMEMBERED + 10):
        assert compiled.matches(f"run.{index}")
        assert not compiled.matches(f"other.{index}")
    assert len(compiled._answers) == TopicPatterns.REMEMBERED
    assert compiled.matches("run.after_the_bound") and not compiled.matches("other.after_the_bound")


def test_access_keys_round_trip_and_compare_in_constant_time() -> None:
    new = generate_key("trigger")
    assert new.token.startswith("aft_") and new.id in new.token
    presented = parse_key(new.token)
    assert presented is not None and presented.kind == "trigger" and presented.id == new.id
    assert secret_matches(presented, new.secret_hash)
    other = generate_key("trigger")
    assert not secret_matches(presented, other.secret_hash), "another key's hash does not match"
    assert not secret_matches(None, new.secret_hash) and not secret_matches(presented, None)
    assert hash_secret(presented.secret) == new.secret_hash
    for bad in ("", "aft_", new.token[:-1], new.token + "x", "xyz_" + new.token[4:], new.token * 3,
                new.token.replace("aft_", "afk_", 1) + "\x00"):  # fmt: skip
        assert parse_key(bad) is None, bad
    api = generate_key("api")
    parsed = parse_key(api.token)
    assert parsed is not None and parsed.kind == "api"


def test_sealing_opens_only_with_the_same_key_and_row() -> None:
    key = new_sealing_key()
    sealed = seal(key, b"whsec_abc", b"row-1")
    assert unseal(key, sealed, b"row-1") == b"whsec_abc"
    assert b"whsec_abc" not in sealed
    with pytest.raises(SealBroken):
        unseal(key, sealed, b"row-2")  # copied to another row
    with pytest.raises(SealBroken):
        unseal(new_sealing_key(), sealed, b"row-1")
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(SealBroken):
        unseal(key, tampered, b"row-1")


def test_sealing_keys_come_from_base64() -> None:
    raw = new_sealing_key()
    assert parse_sealing_key(base64.b64encode(raw).decode()) == raw
    assert parse_sealing_key(base64.urlsafe_b64encode(raw).decode().rstrip("=")) == raw
    for bad in ("", "short", base64.b64encode(b"x" * 31).decode()):
        with pytest.raises(ConfigError, match="32 random bytes"):
            parse_sealing_key(bad)


def test_a_key_name_the_api_schema_allows_is_one_the_engine_accepts() -> None:
    for name in ("zendesk webhook", "cÉË\U0003f580", "ünïcødé ✓", "a"):
        assert re.match(NAME_PATTERN, name) and name_is_valid(name), name
    for name in ("", "   ", "tab\there", "c\u0087", "nul\x00", "x" * 101):
        assert not name_is_valid(name), repr(name)
    assert not re.match(NAME_PATTERN, "   ") and not re.match(NAME_PATTERN, "bell\x07")
