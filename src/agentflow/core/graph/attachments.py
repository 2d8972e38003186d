"""The rules for nodes attached to an agent (seed 001's attached nodes), checked before the
graph's own: each name in an ``attach`` list is a node of an attachable kind, attached to one
agent only, touched by no link; a kind that works only attached is attached."""

from __future__ import annotations

from agentflow.core.graph.model import Graph

Problem = dict[str, str]

SINGLE_KINDS = frozenset({"memory"})
"""Kinds an agent may attach at most one of."""


def check_attachments(graph: Graph, ids: list[str]) -> list[Problem]:
    """Every problem with the attachments of ``graph`` (``ids``: node ids in config order)."""
    problems: list[Problem] = []
    owner: dict[str, str] = {}
    known = set(ids)
    for node_id, node in (*graph.nodes.items(), *graph.attached.items()):
        where = f"{graph.paths[node_id]}.attach"
        kinds: dict[str, str] = {}
        for target in node.attached_ids():
            attached = graph.attached.get(target)
            if target not in known or attached is None:
                problems.append({"path": where, "message": f"no node has id {target!r}"})
            elif not attached.attachable:
                message = f"node {target!r} ({attached.type}) cannot be attached to an agent"
                problems.append({"path": where, "message": message})
            elif target in owner:
                message = f"node {target!r} is already attached to {owner[target]!r}"
                problems.append({"path": where, "message": message})
            elif attached.type in SINGLE_KINDS and attached.type in kinds:
                first = kinds[attached.type]
                message = f"an agent attaches one {attached.type} node, not {first!r} and {target!r}"
                problems.append({"path": where, "message": message})
            else:
                owner[target] = node_id
                kinds.setdefault(attached.type, target)
        if not problems:
            mine = {target: graph.attached[target] for target in node.attached_ids()}
            problems += [{"path": where, "message": m} for m in node.attachment_problems(mine)]
        if node.attached_only and node_id not in graph.attached:
            message = f"a {node.type} node works only attached to an agent: list {node_id!r} in its 'attach'"
            problems.append({"path": graph.paths[node_id], "message": message})
    for link in graph.links:
        for end in (link.source, link.target):
            if end in graph.attached:
                message = f"{end!r} is attached to an agent, so no link may lead to or from it"
                problems.append({"path": link.path, "message": message})
    return problems
