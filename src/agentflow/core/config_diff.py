"""What changed between two versions of a workflow's config (issue 15): each changed field by
its path, and a unified diff of the two as YAML.

Nodes are matched by ``id``, not by position, so moving a node or inserting one reads as what
it is (``nodes[id=ask].message: changed``), not as every later node changing.
"""

from __future__ import annotations

import difflib
from typing import Any

import yaml

MAX_CHANGES = 500


def diff_configs(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Each difference: ``{path, change: added | removed | changed, before, after}``, in order,
    at most ``MAX_CHANGES``."""
    changes: list[dict[str, Any]] = []
    _walk(before, after, "", changes)
    return changes[:MAX_CHANGES]


def unified_yaml(before: dict[str, Any], after: dict[str, Any], labels: tuple[str, str]) -> str:
    """The two configs as YAML, diffed line by line (``difflib.unified_diff``)."""
    old, new = (
        yaml.safe_dump(c, sort_keys=False, allow_unicode=True).splitlines(keepends=True)
        for c in (before, after)
    )
    return "".join(difflib.unified_diff(old, new, fromfile=labels[0], tofile=labels[1]))


def _walk(before: Any, after: Any, path: str, changes: list[dict[str, Any]]) -> None:
    if len(changes) >= MAX_CHANGES or before == after:
        return
    if isinstance(before, dict) and isinstance(after, dict):
        for key in [*before, *(k for k in after if k not in before)]:
            where = f"{path}.{key}" if path else str(key)
            if key not in after:
                changes.append({"path": where, "change": "removed", "before": before[key], "after": None})
            elif key not in before:
                changes.append({"path": where, "change": "added", "before": None, "after": after[key]})
            else:
                _walk(before[key], after[key], where, changes)
        return
    if isinstance(before, list) and isinstance(after, list) and _by_id(before) and _by_id(after):
        old = {item["id"]: item for item in before}
        new = {item["id"]: item for item in after}
        for node_id in [*old, *(i for i in new if i not in old)]:
            where = f"{path}[id={node_id}]"
            if node_id not in new:
                changes.append({"path": where, "change": "removed", "before": old[node_id], "after": None})
            elif node_id not in old:
                changes.append({"path": where, "change": "added", "before": None, "after": new[node_id]})
            else:
                _walk(old[node_id], new[node_id], where, changes)
        return
    changes.append({"path": path or "(config)", "change": "changed", "before": before, "after": after})


def _by_id(items: list[Any]) -> bool:
    """Whether a list is of objects with distinct ``id``s (nodes)."""
    ids = [item.get("id") for item in items if isinstance(item, dict)]
    return len(ids) == len(items) and all(isinstance(i, str) for i in ids) and len(set(ids)) == len(ids)
