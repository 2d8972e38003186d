"""A structured workflow's graph: its nodes and the links between their ports.

A config writes links three ways, and all three become the same ``Link``:

- ``edges``: ``{from, port, to}`` (``port`` defaults to ``result``);
- a node's ``next``: shorthand for an edge from its ``result`` port;
- list order: when the workflow declares no ``edges`` at all (the linear form every config
  had before graphs), a node with neither ``next`` nor edges continues to the following node
  in the list, if its kind has a ``result`` port.

Each link remembers where the config wrote it (``edges[2]``, ``nodes[0].next``), so a
problem found later names the place to fix.

Nodes an ``agent`` node attaches (its ``attach`` list: a memory, tools) are kept apart: they
are no part of the graph's own sequence, so list order skips them and no link may touch them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import field

from pydantic import BaseModel, ConfigDict, Field

from agentflow.core.frozen import frozen
from agentflow.core.node_specs import NODE_ID_PATTERN, NodeSpec

PORT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$"


class Edge(BaseModel):
    """A connection from one node's output port to another node.

    Attributes:
        source: the node it leaves (``from`` in configs).
        port: the output port it leaves by (``result`` unless the kind has others).
        to: the node it enters.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, serialize_by_alias=True)

    source: str = Field(alias="from", pattern=NODE_ID_PATTERN)
    port: str = Field(default="result", pattern=PORT_PATTERN)
    to: str = Field(pattern=NODE_ID_PATTERN)


@frozen
class Link:
    """One connection, wherever the config wrote it.

    Attributes:
        source / port / target: from which node and port to which node.
        path: where the config says so (``edges[2]``, ``nodes[0].next``, ``nodes[0]`` for list
            order), for error messages.
    """

    source: str
    port: str
    target: str
    path: str


@frozen
class Graph:
    """The nodes and links of a structured workflow, indexed both ways.

    Attributes:
        nodes: by id (the first node of a duplicated id; validation refuses duplicates).
        paths: each node's place in the config (``nodes[3]``).
        links: every link, in the order the config states them.
        start: the explicit ``start``, else None.
        linear: the config declares no ``edges`` (list order links nodes).
        attached: the nodes some node attaches, by id (not in ``nodes``; their places are in
            ``paths`` too).
    """

    nodes: dict[str, NodeSpec]
    paths: dict[str, str]
    links: tuple[Link, ...]
    start: str | None
    linear: bool
    attached: dict[str, NodeSpec] = field(default_factory=dict)
    _out: dict[str, list[Link]] = field(default_factory=dict, repr=False)
    _in: dict[str, list[Link]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for link in self.links:
            self._out.setdefault(link.source, []).append(link)
            self._in.setdefault(link.target, []).append(link)

    def outgoing(self, node_id: str, port: str | None = None) -> list[Link]:
        """Links leaving ``node_id`` (by ``port`` when given)."""
        found = self._out.get(node_id, [])
        return found if port is None else [link for link in found if link.port == port]

    def incoming(self, node_id: str) -> list[Link]:
        """Links entering ``node_id``."""
        return self._in.get(node_id, [])

    @property
    def fans_out(self) -> bool:
        """Some port leads to several nodes: activations of one run can be ready at once."""
        ports = [(link.source, link.port) for link in self.links]
        return len(set(ports)) < len(ports)

    def roots(self) -> list[str]:
        """Nodes no link enters, in config order."""
        return [node_id for node_id in self.nodes if not self._in.get(node_id)]

    def entry(self) -> str | None:
        """The node a run starts at: ``start``, else the first node of a linear config, else
        the only node no link enters (None when there is no such single node)."""
        if self.start is not None:
            return self.start
        if self.linear:
            return next(iter(self.nodes), None)
        roots = self.roots()
        return roots[0] if len(roots) == 1 else None

    def reachable(self, origin: str) -> list[str]:
        """Nodes reachable from ``origin`` (itself included), in the order they are found."""
        seen = [origin]
        index = 0
        while index < len(seen):
            for link in self.outgoing(seen[index]):
                if link.target in self.nodes and link.target not in seen:
                    seen.append(link.target)
            index += 1
        return seen


def build_graph(nodes: Sequence[NodeSpec], edges: Sequence[Edge] | None, start: str | None) -> Graph:
    """The graph a config's ``nodes``, ``edges`` and ``start`` describe."""
    attached_ids = {target for node in nodes for target in node.attached_ids()}
    by_id: dict[str, NodeSpec] = {}
    attached: dict[str, NodeSpec] = {}
    paths: dict[str, str] = {}
    links: list[Link] = []
    sequence: list[tuple[int, NodeSpec]] = []
    for index, node in enumerate(nodes):
        paths.setdefault(node.id, f"nodes[{index}]")
        if node.id in attached_ids:
            attached.setdefault(node.id, node)
        else:
            by_id.setdefault(node.id, node)
            sequence.append((index, node))
        if node.next is not None:
            links.append(Link(node.id, "result", node.next, f"nodes[{index}].next"))
    for index, edge in enumerate(edges or ()):
        links.append(Link(edge.source, edge.port, edge.to, f"edges[{index}]"))
    if edges is None:
        for (index, node), (_, following) in itertools.pairwise(sequence):
            if node.next is None and "result" in node.output_ports():
                links.append(Link(node.id, "result", following.id, f"nodes[{index}]"))
    return Graph(by_id, paths, tuple(links), start, edges is None, attached)
