"""Event sources: the kinds of business events the unified log aggregates (seed 000).

An agent workflow lists the sources it listens to (``[{"type": "email"}, {"type":
"ticket"}]``); each source type is the first segment of its events' topics, so source
``email`` means topics ``email.*`` (``email.received``, ``email.sent``). The log keeps every
source in one table with an account index, so "what changed for this account in the last N
hours" is one indexed query whatever the sources. The seeds name ``email``, ``ticket``,
``note``, ``meeting``, ``activity``, ``signal`` (signal updates), ``task`` (task changes) and
``account`` (account updates); any other name works the same way.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

SOURCE_PATTERN = r"^[a-z][a-z0-9_]{0,49}$"


def source_of(topic: str) -> str:
    """The source of an event topic: its first dot-separated segment."""
    return topic.split(".", 1)[0]


def source_topics(source_types: Iterable[str]) -> list[str]:
    """Topic patterns of the given source types (``email`` -> ``email.*``)."""
    return [f"{kind}.*" for kind in source_types]


def topic_matches(patterns: Iterable[str], topic: str) -> bool:
    """Whether ``topic`` matches one of the glob ``patterns``."""
    return any(fnmatch.fnmatchcase(topic, pattern) for pattern in patterns)


class TopicPatterns:
    """Glob topic patterns compiled once into one regular expression, with the answer for each
    topic asked remembered (up to ``REMEMBERED`` topics).

    What a worker asks at every checkpoint (does any workflow listen to ``run.completed``?)
    and a dispatcher for every batch: with a hundred listening workflows, ``topic_matches``
    tried every pattern each time (41 % of a worker's busy samples while E3's runs ran).
    """

    REMEMBERED = 1024

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(dict.fromkeys(patterns))
        joined = "|".join(fnmatch.translate(pattern) for pattern in self.patterns)
        self._regex = re.compile(joined) if joined else None
        self._answers: dict[str, bool] = {}

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` matches one of the patterns (as ``topic_matches``)."""
        answer = self._answers.get(topic)
        if answer is None:
            answer = self._regex is not None and self._regex.match(topic) is not None
            if len(self._answers) < self.REMEMBERED:
                self._answers[topic] = answer
        return answer
