"""What a proxied request cycle was: the engine's path its SQL belongs to, what the server
answered it, and what losing that answer left behind (``tests.support.fault_proxy``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Ordered: the first pattern found in a cycle's SQL names it. Transactions (BEGIN ... COMMIT)
# are named by the statements they ran, at their COMMIT.
CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE | re.DOTALL))
    for name, pattern in (
        ("checkpoint", r"INSERT INTO run_steps"),
        ("claim", r"FOR UPDATE SKIP LOCKED.*due\.verdict"),
        ("ingest", r"INSERT INTO events"),
        ("dispatch", r"UPDATE consumer_offsets SET"),
        ("consumer_poll", r"consumer_offsets"),
        ("heartbeat", r"UPDATE runs r SET lease_expires_at"),
        ("release", r"UPDATE runs SET lease_owner = NULL"),
        ("other_write", r"\b(INSERT|UPDATE|DELETE|COMMIT)\b"),
    )
)


def classify(sql: str, categories: tuple[tuple[str, re.Pattern[str]], ...] = CATEGORIES) -> str:
    """The category of a cycle (or transaction) that ran ``sql``; ``read`` when no write."""
    for name, pattern in categories:
        if pattern.search(sql):
            return name
    return "read"


@dataclass
class Cycle:
    """One request cycle in flight on a link, and what the server answered it so far."""

    fate: str  # "pass", "lose_reply" or "stall"
    category: str
    writes: bool
    error: bool = False
    rows: int = 0  # rows reported: the number ending each command tag, or rows sent back
    committed: bool = False  # a COMMIT command completed
    data_rows: int = 0


def lost_reply_outcome(cycle: Cycle, status: bytes) -> str:
    """What a cycle whose reply was lost left behind, from what the server answered it and
    its final transaction ``status`` (``ReadyForQuery``)."""
    if cycle.error:
        return "reply_lost_after_error"
    if status != b"I":
        return "reply_lost_in_transaction"  # the server rolls it back when the link drops
    if not cycle.writes:
        return "reply_lost_read"
    if cycle.committed or cycle.rows > 0 or cycle.data_rows > 0:
        return "committed_but_reported_failed"
    return "reply_lost_no_change"  # a write that matched no row (an idle claim, say)
