"""An event producer process for the ingest fault tests: POSTs events, retries, records answers.

Run as ``python -m tests.support.producer SPEC_JSON OUT_JSON``. The spec says where to post,
how many events, the id prefix, the topic, the seed, the pace and the share re-posted. Each
event is POSTed to ``/api/events`` with its own ``message_id`` until a 2xx answer
acknowledges it; a 503 (waiting as ``Retry-After`` says, capped) or a connection error is
retried with the same id, as a careful producer does. ``repost`` of the events are
POSTed once more, a little later, after their acknowledgement (a producer that did not trust
its first answer). Every answer is recorded: the status codes, whether each 503 carried a
usable ``Retry-After``, and for each 2xx the ``seq`` and ``created`` the server returned.

``naive: true`` makes a broken producer for negative controls: it posts each event once and
counts a 503 or a connection error as acknowledged.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

RETRY_CAP = 0.5
"""The longest a 503 makes the producer wait (its ``Retry-After`` says longer; tests are short)."""

MAX_ATTEMPTS = 600
"""Attempts per post before giving up (a server that never recovers must not hang the test)."""


def _event(spec: dict[str, Any], index: int, rng: random.Random) -> dict[str, Any]:
    return {
        "topic": spec["topic"],
        "message_id": f"{spec['prefix']}-{index}",
        "data": {"account_id": f"acct-{rng.randrange(spec['keys'])}", "n": index},
    }


def _plan(spec: dict[str, Any], rng: random.Random) -> list[tuple[dict[str, Any], bool]]:
    """The posts in order: (event, is_repost); a re-post follows its original by 5-60 posts.

    Exactly ``repost`` of the events (rounded) are posted again, so a check of their share
    never depends on the seed."""
    posts: list[tuple[dict[str, Any], bool]] = []
    later: dict[int, list[dict[str, Any]]] = {}
    reposted = set(rng.sample(range(spec["count"]), round(spec["count"] * spec["repost"])))
    for index in range(spec["count"]):
        event = _event(spec, index, rng)
        posts.append((event, False))
        if index in reposted:
            later.setdefault(index + rng.randint(5, 60), []).append(event)
        posts.extend((e, True) for e in later.pop(index, []))
    posts.extend((e, True) for pending in later.values() for e in pending)
    return posts


def produce(spec: dict[str, Any]) -> dict[str, Any]:
    """Post every planned event until acknowledged; return what happened."""
    rng = random.Random(spec["seed"])
    statuses: Counter[str] = Counter()
    answers: dict[str, list[list[Any]]] = {}  # message_id -> [[seq, created], ...] of 2xx answers
    naive_acked: list[str] = []
    no_retry_after = 0
    bad_bodies = 0
    reposts = 0
    gave_up: list[str] = []
    interval = 1.0 / spec["rate"]
    next_at = time.monotonic()
    with httpx.Client(base_url=spec["url"], timeout=15.0) as client:
        for event, repost in _plan(spec, rng):
            reposts += repost
            for _attempt in range(MAX_ATTEMPTS):
                next_at = max(next_at + interval, time.monotonic())
                try:
                    response = client.post("/api/events", json=event)
                except httpx.HTTPError as exc:
                    statuses[f"error:{type(exc).__name__}"] += 1
                    if spec.get("naive"):
                        naive_acked.append(event["message_id"])
                        break
                    time.sleep(rng.uniform(0.05, 0.2))
                    continue
                statuses[str(response.status_code)] += 1
                if 200 <= response.status_code < 300:
                    try:
                        stored = response.json()["events"][0]
                        answers.setdefault(event["message_id"], []).append([stored["seq"], stored["created"]])
                    except (ValueError, KeyError, IndexError, TypeError):
                        bad_bodies += 1
                    break
                if response.status_code == 503:
                    retry_after = response.headers.get("retry-after", "")
                    if not retry_after.isdigit():
                        no_retry_after += 1
                    if spec.get("naive"):
                        naive_acked.append(event["message_id"])
                        break
                    wait = min(int(retry_after) if retry_after.isdigit() else 1, RETRY_CAP)
                    time.sleep(wait * rng.uniform(0.5, 1.0))
                    continue
                # Anything else is a bug the test reports; retrying keeps the count of
                # acknowledged events honest (the event may still be stored later).
                time.sleep(0.1)
            else:
                gave_up.append(event["message_id"])
            time.sleep(max(0.0, next_at - time.monotonic()))
    return {
        "prefix": spec["prefix"],
        "topic": spec["topic"],
        "events": spec["count"],
        "reposts": reposts,
        "statuses": dict(statuses),
        "answers": answers,
        "naive_acked": naive_acked,
        "gave_up": gave_up,
        "503_without_retry_after": no_retry_after,
        "unreadable_2xx_bodies": bad_bodies,
    }


def main() -> None:
    """``python -m tests.support.producer SPEC_JSON OUT_JSON``."""
    spec = json.loads(sys.argv[1])
    result = produce(spec)
    Path(sys.argv[2]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
