"""The playbooks agentflow ships: markdown files in ``agentflow/knowledge/playbooks/``.

Each starts with a front matter (``title``, ``scenarios``, ``tags``) and has the sections
"When to use", "Steps" (numbered, each ending with ``(owner: ROLE; due: OFFSET)``), "Signals
to watch" and "Done when". They are read once per process.
"""

from __future__ import annotations

import functools
from importlib import resources

from agentflow.knowledge.documents import PreparedDocument, prepare_document
from agentflow.knowledge.markdown import split_front_matter

PLAYBOOKS_DIRECTORY = "playbooks"


@functools.cache
def builtin_playbooks() -> tuple[PreparedDocument, ...]:
    """Every bundled playbook, checked and chunked, in file name order."""
    directory = resources.files("agentflow.knowledge") / PLAYBOOKS_DIRECTORY
    found = []
    for entry in sorted(directory.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".md"):
            continue
        text = entry.read_text(encoding="utf-8")
        meta, _ = split_front_matter(text)
        title = meta.get("title")
        if not isinstance(title, str):
            raise RuntimeError(f"bundled playbook {entry.name} has no title in its front matter")
        found.append(prepare_document(title, text))
    return tuple(found)
