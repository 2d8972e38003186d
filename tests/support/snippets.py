"""The code blocks of the documentation, and the links and file paths it cites.

Markers (HTML comments, invisible on GitHub) tell the docs test how to treat a block; a
marker goes on the line right before the block's opening fence (blank lines allowed):

- ``<!-- snippet: skip (why) -->``: do not run this block (say why: installs packages, blocks).
- ``<!-- snippet: file NAME -->``: write the block into the document's directory as NAME
  (a Python or YAML block whose first line is ``# NAME.py`` / ``# NAME.yaml`` is a file too).

and one stands alone, where its code should run:

- ``<!-- snippet: hidden`` ... ``-->``: Python run at that point of the document, unseen by
  readers, to make what a block needs (a run with tasks, ``$TASK`` for the next commands).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^\s*```(?P<lang>[\w+-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(?P<body>.*?)\s*-->\s*$")
_HIDDEN_OPEN = re.compile(r"^\s*<!--\s*snippet:\s*hidden\s*$")
_FILE_LINE = re.compile(r"^#\s*(?P<name>[\w.-]+\.(?:py|ya?ml|md|json))\s*$")


@dataclass(frozen=True)
class Snippet:
    """One code block (or hidden block) of a document.

    Attributes:
        doc: the document. line: where the block's code starts (1-based).
        lang: the fence's language (``python`` for hidden blocks). code: the block's text.
        skip: why it must not run, when marked so. file: write it as this file instead.
        hidden: Python from a hidden marker.
    """

    doc: Path
    line: int
    lang: str
    code: str
    skip: str | None = None
    file: str | None = None
    hidden: bool = False

    @property
    def where(self) -> str:
        """``path:line`` of the block, for messages."""
        doc = self.doc.relative_to(ROOT) if self.doc.is_relative_to(ROOT) else self.doc
        return f"{doc}:{self.line}"


def documents() -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def snippets(doc: Path) -> list[Snippet]:
    """The blocks of ``doc`` in order, with their markers applied.

    Raises:
        ValueError: a marker this module does not know, a skip without a reason, or a
            block that is never closed.
    """
    lines = doc.read_text().splitlines()
    found: list[Snippet] = []
    pending: tuple[str, int] | None = None  # the last marker, and its line
    i = 0
    while i < len(lines):
        text = lines[i]
        if _HIDDEN_OPEN.match(text):
            end = _closing(lines, i, "-->", doc)
            found.append(Snippet(doc, i + 2, "python", "\n".join(lines[i + 1 : end]) + "\n", hidden=True))
            i = end + 1
            continue
        marker = _MARKER.match(text)
        if marker:
            pending = (marker["body"], i + 1)
        elif (fence := _FENCE.match(text)) is not None:
            end = _closing(lines, i, "```", doc)
            code = "\n".join(lines[i + 1 : end]) + "\n"
            found.append(_snippet(doc, i + 2, fence["lang"], code, pending))
            pending = None
            i = end + 1
            continue
        elif text.strip():
            pending = None  # a marker applies to the block right after it only
        i += 1
    return found


def _closing(lines: list[str], start: int, token: str, doc: Path) -> int:
    for j in range(start + 1, len(lines)):
        if lines[j].strip() == token:
            return j
    raise ValueError(f"{doc}:{start + 1}: never closed (expected {token!r})")


def _snippet(doc: Path, line: int, lang: str, code: str, marker: tuple[str, int] | None) -> Snippet:
    skip = file = None
    if marker is not None:
        body, at = marker
        if body.startswith("skip"):
            reason = body.removeprefix("skip").strip()
            if not (reason.startswith("(") and reason.endswith(")") and len(reason) > 2):
                raise ValueError(f"{doc}:{at}: write the reason: <!-- snippet: skip (why) -->")
            skip = reason[1:-1]
        elif body.startswith("file "):
            file = body.removeprefix("file ").strip()
        else:
            raise ValueError(f"{doc}:{at}: unknown snippet marker {body!r}")
    first = code.split("\n", 1)[0]
    named = _FILE_LINE.match(first) if lang in ("python", "yaml", "yml") else None
    if named and file is None:
        file = named["name"]
    return Snippet(doc, line, lang, code, skip=skip, file=file)


# --- links and cited paths ------------------------------------------------------------------

_LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
_CODE_SPAN = re.compile(r"`([^`]+)`")
_PATH = re.compile(r"^[\w.*-]+(?:/[\w.*-]+)+\.[A-Za-z]+$")
_BARE_MD = re.compile(r"\b[\w-]+\.md\b")
_HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$")


def prose(doc: Path) -> list[tuple[int, str]]:
    """The lines of ``doc`` outside code blocks and HTML comments, numbered from 1."""
    kept: list[tuple[int, str]] = []
    fenced = comment = False
    for n, text in enumerate(doc.read_text().splitlines(), 1):
        if comment:
            comment = "-->" not in text
            continue
        if text.strip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        if "<!--" in text and "-->" not in text:
            comment = True
            continue
        kept.append((n, re.sub(r"<!--.*?-->", "", text)))
    return kept


def anchors(doc: Path) -> set[str]:
    """The heading anchors GitHub makes for ``doc``."""
    return {slug(m["title"]) for _, text in prose(doc) if (m := _HEADING.match(text))}


def slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"`|\*|_(?=\W)|(?<=\W)_", "", title.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def broken_references(doc: Path) -> list[str]:
    """Relative links, anchors and cited repository paths of ``doc`` that lead nowhere."""
    problems: list[str] = []
    here = f"{doc.relative_to(ROOT)}" if doc.is_relative_to(ROOT) else str(doc)
    for n, text in prose(doc):
        for match in _LINK.finditer(text):
            target = match["target"]
            if re.match(r"^[a-z]+:", target):  # https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            file = (doc.parent / path_part).resolve() if path_part else doc
            if not file.exists():
                problems.append(f"{here}:{n}: link to a missing file {target}")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                problems.append(f"{here}:{n}: link to a missing heading {target}")
        spans = _CODE_SPAN.findall(text)
        for span in spans:
            if _PATH.match(span) and not _exists(span, doc):
                problems.append(f"{here}:{n}: cites a missing file {span}")
        bare = _CODE_SPAN.sub("", _LINK.sub("", text))
        for name in _BARE_MD.findall(bare):
            if name not in _repository_names():
                problems.append(f"{here}:{n}: names a file that is not in the repository: {name}")
    return problems


@functools.cache
def _repository_names() -> frozenset[str]:
    names: set[str] = set()
    for _, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("node_modules", "__pycache__")]
        names.update(files)
    return frozenset(names)


def _exists(path: str, doc: Path) -> bool:
    # Paths are written from the repository root, the document, or the package.
    bases = [ROOT, doc.parent, ROOT / "src" / "agentflow"]
    return any(list(base.glob(path)) if "*" in path else (base / path).exists() for base in bases)
