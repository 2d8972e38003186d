"""The fault proxy's reading of the wire protocol (``tests.support.pg_wire``) and of what a
cycle whose reply it lost left behind (``tests.support.cycles``): the fault tests' verdicts
rest on both."""

from __future__ import annotations

import struct

from tests.support.cycles import Cycle, classify, lost_reply_outcome
from tests.support.pg_wire import Upstream, cstring, frames, through_port, upstream_of


def message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def test_frames_are_found_in_order_and_a_cut_off_one_is_left_for_later() -> None:
    parse = message(b"P", b"s1\x00SELECT 1\x00\x00\x00")
    sync = message(b"S", b"")
    query = message(b"Q", b"COMMIT\x00")
    data = parse + sync + query[:7]
    found = list(frames(data))
    assert [(kind, start, end) for kind, start, end in found] == [
        (b"P", 0, len(parse)),
        (b"S", len(parse), len(parse) + len(sync)),
    ]
    assert list(frames(query)) == [(b"Q", 0, len(query))]
    assert list(frames(b"Z\x00\x00")) == []


def test_cstring_reads_up_to_its_nul() -> None:
    assert cstring(b"stmt\x00SELECT 1\x00rest") == ("stmt", b"SELECT 1\x00rest")


def test_upstreams_and_urls_through_the_proxy() -> None:
    assert upstream_of("postgresql://u:p@db.example:6543/app") == Upstream(host="db.example", port=6543)
    assert upstream_of("postgresql://u@/app?host=/tmp/pg&port=5433") == Upstream(path="/tmp/pg/.s.PGSQL.5433")
    url = through_port("postgresql://u:p@db.example:6543/app?host=/tmp/pg&application_name=x", 40000)
    assert url == "postgresql://u:p@127.0.0.1:40000/app?application_name=x&sslmode=disable"


def test_cycles_are_named_by_the_engine_path_their_sql_belongs_to() -> None:
    assert classify("INSERT INTO run_steps (run_id) VALUES ($1)") == "checkpoint"
    assert classify("UPDATE runs r SET lease_expires_at = now()") == "heartbeat"
    assert classify("DELETE FROM tasks") == "other_write"
    assert classify("SELECT 1") == "read"


def test_a_lost_reply_is_judged_by_what_the_server_answered() -> None:
    def cycle(**seen: object) -> Cycle:
        return Cycle(fate="lose_reply", category="checkpoint", writes=bool(seen.pop("writes", True)), **seen)  # type: ignore[arg-type]

    assert lost_reply_outcome(cycle(rows=1), b"I") == "committed_but_reported_failed"
    assert lost_reply_outcome(cycle(data_rows=1), b"I") == "committed_but_reported_failed"
    assert lost_reply_outcome(cycle(committed=True), b"I") == "committed_but_reported_failed"
    assert lost_reply_outcome(cycle(), b"I") == "reply_lost_no_change"
    assert lost_reply_outcome(cycle(rows=1), b"T") == "reply_lost_in_transaction"
    assert lost_reply_outcome(cycle(rows=1, error=True), b"I") == "reply_lost_after_error"
    assert lost_reply_outcome(cycle(writes=False), b"I") == "reply_lost_read"
