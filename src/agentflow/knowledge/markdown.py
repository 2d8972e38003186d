"""Reading knowledge documents written in markdown: front matter, sections, list items.

Only the little markdown a playbook needs is understood: an optional YAML front matter
between ``---`` lines, ATX headings (``## Steps``) outside fenced code blocks, numbered items
(``1. Do this``) and bullets (``- watch that``), each with its continuation lines.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from agentflow.core import safe_yaml
from agentflow.core.errors import ConfigError
from agentflow.core.frozen import frozen

MAX_FRONT_MATTER = 10_000
"""The longest front matter read, in characters."""

_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_NUMBERED = re.compile(r"^ {0,3}\d{1,3}[.)][ \t]+(.*)$")
_BULLET = re.compile(r"^ {0,3}[-*+][ \t]+(.*)$")
_EMPHASIS = re.compile(r"\*\*|__|`")


@frozen
class Section:
    """The text under one heading (``heading`` is None for text before the first heading)."""

    heading: str | None
    level: int
    text: str


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """Separate a YAML front matter from the markdown after it.

    Returns:
        The front matter (empty when there is none) and the rest of the text.

    Raises:
        ConfigError: ``knowledge_invalid`` when the front matter is unterminated, too long,
            not YAML, nested too deep or expanded too far by aliases, or not a mapping.
    """
    stripped = text.lstrip("\ufeff")
    if not re.match(r"---[ \t]*\r?\n", stripped):
        return {}, text
    end = re.search(r"^(?:---|\.\.\.)[ \t]*$", stripped[3:], re.MULTILINE)
    if end is None or end.start() > MAX_FRONT_MATTER:
        raise _invalid("the front matter has no closing '---' line within 10,000 characters")
    raw = stripped[3 : 3 + end.start()]
    try:
        data = safe_yaml.load(raw)
    except safe_yaml.YamlLimitError as exc:
        raise _invalid(f"the front matter is refused: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise _invalid(f"the front matter is not valid YAML ({str(exc).splitlines()[0]})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise _invalid("the front matter must be a mapping (title: ..., tags: [...])")
    return data, stripped[3 + end.end() :].lstrip("\r\n")


def split_sections(body: str) -> list[Section]:
    """The sections of ``body`` by heading, in order; sections with no text are left out."""
    sections: list[Section] = []
    heading: str | None = None
    level = 0
    lines: list[str] = []
    fenced = False
    for line in body.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        match = None if fenced else _HEADING.match(line)
        if match is None:
            lines.append(line)
            continue
        _close(sections, heading, level, lines)
        heading, level, lines = plain(match.group(2)), len(match.group(1)), []
    _close(sections, heading, level, lines)
    return sections


def _close(sections: list[Section], heading: str | None, level: int, lines: list[str]) -> None:
    text = "\n".join(lines).strip("\n")
    if text.strip():
        sections.append(Section(heading, level, text))


def first_heading(body: str) -> str | None:
    """The text of the first heading of ``body``, if it has one."""
    fenced = False
    for line in body.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        match = None if fenced else _HEADING.match(line)
        if match:
            return plain(match.group(2))
    return None


def numbered_items(text: str) -> list[str]:
    """The items of the numbered lists in ``text``, each with its continuation lines joined."""
    return _items(text, _NUMBERED)


def bullet_items(text: str) -> list[str]:
    """The items of the bulleted lists in ``text``, each with its continuation lines joined."""
    return _items(text, _BULLET)


def _items(text: str, marker: re.Pattern[str]) -> list[str]:
    items: list[list[str]] = []
    open_item = False
    after_blank = False
    for line in text.splitlines():
        match = marker.match(line)
        if match:
            items.append([match.group(1)])
            open_item, after_blank = True, False
        elif not line.strip():
            after_blank = True
        elif open_item and (not after_blank or line.startswith((" ", "\t"))):
            # A continuation: right under the item, or indented after a blank line.
            items[-1].append(line.strip())
            after_blank = False
        else:
            open_item = False  # a paragraph after the list ends it
    return [plain(" ".join(parts)) for parts in items if " ".join(parts).strip()]


def plain(text: str) -> str:
    """``text`` without bold and code markers, its whitespace collapsed."""
    return " ".join(_EMPHASIS.sub("", text).split())


def _invalid(message: str) -> ConfigError:
    return ConfigError(
        "knowledge_invalid",
        message,
        details={"errors": [{"path": "body", "message": message}]},
        solution="Start the document with '---', YAML such as 'title: ...' and 'tags: [...]', then '---'.",
    )
