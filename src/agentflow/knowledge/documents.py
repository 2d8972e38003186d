"""Checking a knowledge document and cutting it into chunks, before anything is written.

A document is a title, tags and a markdown body. A front matter in the body may add tags
(``tags:`` and ``scenarios:``, merged). The body (without its front matter) is cut into one
chunk per section, and a section longer than ``MAX_CHUNK`` characters into several, at line
boundaries so that a list item is never split.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

from agentflow.core.errors import ConfigError
from agentflow.core.frozen import frozen
from agentflow.knowledge.markdown import first_heading, split_front_matter, split_sections
from agentflow.store.knowledge import NewChunk

MAX_TITLE = 200
"""The longest title, in characters."""
MAX_BODY = 200_000
"""The longest body, in characters."""
MAX_TAGS = 50
"""The most tags a document may have (front matter included)."""
MAX_TAG = 80
"""The longest tag, in characters."""
MAX_CHUNK = 1_800
"""The longest chunk, in characters: long sections are cut into several."""
MAX_CHUNKS = 500
"""The most chunks a document may have."""
MAX_SCENARIO = 1_000
"""The longest scenario (search text), in characters."""
MAX_LIMIT = 50
"""The most passages one search returns."""

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_FRONT_MATTER_TAGS = ("tags", "scenarios")


@frozen
class PreparedDocument:
    """A checked document, ready to store."""

    title: str
    tags: tuple[str, ...]
    body: str
    chunks: tuple[NewChunk, ...]
    content_hash: str


def prepare_document(title: Any, body: Any, tags: Iterable[Any] = ()) -> PreparedDocument:
    """Check a document and cut it into chunks.

    Args:
        title: 1 to 200 characters, one line.
        body: markdown (or plain text), at most 200,000 characters, optionally starting with a
            YAML front matter whose ``tags`` and ``scenarios`` are added to ``tags``.
        tags: words and phrases the document is about ("churn", "at risk").

    Raises:
        ConfigError: ``knowledge_invalid``, listing each offending field; nothing is written.
    """
    errors: list[dict[str, str]] = []
    clean_title = _title(title, errors)
    rest, more_tags = _body(body, errors)
    clean_tags = _tags([*(tags if not isinstance(tags, str) else [tags]), *more_tags], errors)
    chunks: tuple[NewChunk, ...] = ()
    if not errors:
        chunks = chunk_markdown(rest, clean_title)
        if len(chunks) > MAX_CHUNKS:
            errors.append({"path": "body", "message": f"the body has more than {MAX_CHUNKS} sections"})
    if errors:
        raise ConfigError(
            "knowledge_invalid",
            f"invalid document: {errors[0]['path']}: {errors[0]['message']}",
            details={"errors": errors},
            solution="Give a one-line title, a non-empty markdown body and short tags.",
        )
    digest = hashlib.sha256(json.dumps([clean_title, clean_tags, rest]).encode()).hexdigest()
    return PreparedDocument(clean_title, tuple(clean_tags), rest, chunks, digest)


def suggest_title(text: str) -> str | None:
    """The title a markdown text gives itself: its front matter's ``title``, else its first heading."""
    meta, rest = split_front_matter(text)
    title = meta.get("title")
    if isinstance(title, str) and title.strip():
        return title.strip()
    return first_heading(rest)


def chunk_markdown(body: str, title: str) -> tuple[NewChunk, ...]:
    """One chunk per section of ``body`` (text before the first heading is under ``title``)."""
    chunks: list[NewChunk] = []
    for section in split_sections(body):
        heading = section.heading or title
        chunks.extend(NewChunk(heading, piece) for piece in _pieces(section.text))
    return tuple(chunks)


def check_scenario(scenario: Any, limit: Any = 1) -> str:
    """A scenario (search text) and a result limit, checked.

    Raises:
        ConfigError: ``knowledge_query_invalid``.
    """
    problem = None
    if not isinstance(scenario, str) or not scenario.strip():
        problem = ("scenario", "describe the scenario in a few words, e.g. 'get well plan'")
    elif len(scenario) > MAX_SCENARIO:
        problem = ("scenario", f"a scenario has at most {MAX_SCENARIO} characters")
    elif _UNSTORABLE.search(scenario):
        problem = ("scenario", "a scenario cannot hold the NUL character or a lone surrogate")
    elif isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        problem = ("limit", f"limit is a whole number from 1 to {MAX_LIMIT}")
    if problem is not None:
        raise ConfigError(
            "knowledge_query_invalid",
            f"invalid search: {problem[0]}: {problem[1]}",
            details={"errors": [{"path": problem[0], "message": problem[1]}]},
        )
    return " ".join(str(scenario).split())


def _title(title: Any, errors: list[dict[str, str]]) -> str:
    if not isinstance(title, str) or not title.strip():
        errors.append({"path": "title", "message": "a title is required"})
        return ""
    text = title.strip()
    if len(text) > MAX_TITLE:
        errors.append({"path": "title", "message": f"a title has at most {MAX_TITLE} characters"})
    elif _UNSTORABLE.search(text) or _CONTROL.search(text):
        errors.append({"path": "title", "message": "a title is one line without control or NUL characters"})
    return text


def _body(body: Any, errors: list[dict[str, str]]) -> tuple[str, list[Any]]:
    if not isinstance(body, str) or not body.strip():
        errors.append({"path": "body", "message": "the body is empty"})
        return "", []
    if len(body) > MAX_BODY:
        errors.append({"path": "body", "message": f"the body has more than {MAX_BODY:,} characters"})
        return "", []
    if _UNSTORABLE.search(body):
        errors.append({"path": "body", "message": "the body holds a NUL character or a lone surrogate"})
        return "", []
    try:
        meta, rest = split_front_matter(body)
    except ConfigError as exc:
        errors.extend(exc.info.details["errors"])
        return "", []
    if not rest.strip():
        errors.append({"path": "body", "message": "the body has no text after its front matter"})
    more: list[Any] = []
    for key in _FRONT_MATTER_TAGS:
        value = meta.get(key)
        if isinstance(value, list):
            more.extend(value)
        elif value is not None:
            more.append(value)
    return rest.strip("\n"), more


def _tags(tags: list[Any], errors: list[dict[str, str]]) -> list[str]:
    clean: list[str] = []
    seen: set[str] = set()
    for i, tag in enumerate(tags):
        text = " ".join(tag.split()) if isinstance(tag, str) else ""
        if not text or len(text) > MAX_TAG or _UNSTORABLE.search(text) or _CONTROL.search(text):
            message = f"a tag is a word or phrase of 1 to {MAX_TAG} characters"
            errors.append({"path": f"tags[{i}]", "message": message})
        elif text.casefold() not in seen:
            seen.add(text.casefold())
            clean.append(text)
    if len(clean) > MAX_TAGS:
        errors.append({"path": "tags", "message": f"a document has at most {MAX_TAGS} tags"})
    return clean


def _pieces(text: str) -> list[str]:
    """``text`` cut at line boundaries into pieces of at most ``MAX_CHUNK`` characters (a
    longer line is cut at a space)."""
    if len(text) <= MAX_CHUNK:
        return [text]
    pieces: list[str] = []
    current = ""
    for line in _short_lines(text):
        if current and len(current) + 1 + len(line) > MAX_CHUNK:
            pieces.append(current)
            current = ""
        current = f"{current}\n{line}" if current else line
    if current.strip():
        pieces.append(current)
    return [p.strip("\n") for p in pieces if p.strip()]


def _short_lines(text: str) -> Iterable[str]:
    for line in text.splitlines():
        while len(line) > MAX_CHUNK:
            cut = line.rfind(" ", 0, MAX_CHUNK)
            cut = cut if cut > 0 else MAX_CHUNK
            yield line[:cut]
            line = line[cut:].lstrip()
        yield line
