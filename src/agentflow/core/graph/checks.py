"""The rules a graph must pass to be published, each problem named by its config path.

Checked in order: node ids, attached nodes (``agentflow.core.graph.attachments``), links
(their ends and ports), the start, cycles, reachability, and what each node reads from
``input``. Later rules run only when the earlier ones pass,
so one mistake (a misspelt id) is reported once, not again as an unreachable node.
"""

from __future__ import annotations

from agentflow.core.graph.attachments import check_attachments
from agentflow.core.graph.model import Graph, Link
from agentflow.core.graph.schema_paths import can_have, keys_of
from agentflow.core.node_specs import NodeSpec
from agentflow.core.templating.references import Path, template_reads

Problem = dict[str, str]

TEMPLATE_FIELDS_EXCLUDED = {
    "id",
    "type",
    "name",
    "next",
    "retry",
    "timeout",
    "output_params",
    "description",
    "parameters",
}
"""Node fields that are never templates; every other field may hold some."""


def check_graph(graph: Graph, ids: list[str]) -> list[Problem]:
    """Every structural problem of ``graph`` (``ids``: the node ids in config order)."""
    attached = check_attachments(graph, ids)
    if attached:  # a misattached node would show again below as unlinked or unknown
        return _check_ids(ids) + attached
    problems = _check_ids(ids) + _check_links(graph) + _check_start(graph)
    if problems:
        return problems
    problems += _check_cycles(graph)
    if problems:
        return problems
    return _check_reachable(graph) + _check_bodies(graph)


def check_inputs(graph: Graph) -> list[Problem]:
    """Every ``{{ input.x }}`` that no direct predecessor can produce.

    A node that joins sees ``input`` by predecessor id, so ``input.<id>.x`` must exist in
    that predecessor's output; any other node sees the output of whichever predecessor
    fired, so the path must exist in every one of them. The first node's ``input`` is the
    run's input, which is not known before it starts.
    """
    problems: list[Problem] = []
    entry = graph.entry()
    for node_id, node in graph.nodes.items():
        incoming = graph.incoming(node_id)
        if node_id == entry or not incoming:
            continue
        fields = node.model_dump(mode="json", exclude=TEMPLATE_FIELDS_EXCLUDED | node.literal_fields)
        for path, read in template_reads(fields, "input", graph.paths[node_id]):
            problem = _unproducible(graph, node, incoming, read)
            if problem is not None:
                problems.append({"path": path, "message": problem})
    return problems


def _check_ids(ids: list[str]) -> list[Problem]:
    problems, seen = [], set()
    for index, node_id in enumerate(ids):
        if node_id in seen:
            problems.append({"path": f"nodes[{index}].id", "message": f"duplicate node id {node_id!r}"})
        seen.add(node_id)
    return problems


def _check_links(graph: Graph) -> list[Problem]:
    problems: list[Problem] = []
    taken: dict[tuple[str, str, str], Link] = {}
    for link in graph.links:
        where = link.path if link.path.endswith(".next") else f"{link.path}.from"
        source = graph.nodes.get(link.source)
        if source is None:
            problems.append({"path": where, "message": f"no node has id {link.source!r}"})
            continue
        if link.target not in graph.nodes:
            target_path = link.path if link.path.endswith(".next") else f"{link.path}.to"
            problems.append({"path": target_path, "message": f"no node has id {link.target!r}"})
            continue
        ports = source.output_ports()
        if link.port not in ports:
            shown = ", ".join(ports) if ports else "none: the run ends there"
            port_path = link.path if link.path.endswith(".next") else f"{link.path}.port"
            message = f"node {link.source!r} ({source.type}) has no port {link.port!r}; its ports: {shown}"
            problems.append({"path": port_path, "message": message})
            continue
        earlier = taken.get((link.source, link.port, link.target))
        if earlier is not None:
            message = f"{link.source!r} {link.port!r} already leads to {link.target!r} ({earlier.path})"
            problems.append({"path": link.path, "message": message})
            continue
        taken[(link.source, link.port, link.target)] = link
    return problems


def _check_start(graph: Graph) -> list[Problem]:
    if graph.start is not None:
        if graph.start not in graph.nodes:
            return [{"path": "start", "message": f"no node has id {graph.start!r}"}]
        return []
    if graph.entry() is not None:
        return []
    roots = graph.roots()
    if not roots:
        message = "every node has an incoming edge, so none can start the run; set 'start'"
    else:
        message = (
            f"several nodes have no incoming edge ({', '.join(roots)}), so the start is ambiguous; "
            "set 'start' to one of them and connect the others"
        )
    return [{"path": "start", "message": message}]


def _check_cycles(graph: Graph) -> list[Problem]:
    # Depth-first search; a link to a node still on the path closes a cycle. Iterative, so a
    # graph of thousands of nodes in a row does not exhaust Python's recursion limit.
    state: dict[str, int] = {}  # 1: on the path, 2: done
    problems: list[Problem] = []
    for root in graph.nodes:
        if root in state:
            continue
        state[root] = 1
        path = [root]
        pending = [iter(graph.outgoing(root))]
        while pending:
            link = next(pending[-1], None)
            if link is None:
                state[path.pop()] = 2
                pending.pop()
            elif state.get(link.target) == 1:
                loop = " -> ".join([*path[path.index(link.target) :], link.target])
                problems.append(
                    {
                        "path": link.path,
                        "message": f"the links form a cycle: {loop} (a graph may not loop back)",
                    }
                )
            elif link.target not in state:
                state[link.target] = 1
                path.append(link.target)
                pending.append(iter(graph.outgoing(link.target)))
    return problems


def _check_reachable(graph: Graph) -> list[Problem]:
    entry = graph.entry()
    assert entry is not None  # _check_start passed
    reached = set(graph.reachable(entry))
    return [
        {
            "path": graph.paths[node_id],
            "message": f"node {node_id!r} cannot be reached from the start {entry!r}",
        }
        for node_id in graph.nodes
        if node_id not in reached
    ]


def _check_bodies(graph: Graph) -> list[Problem]:
    """A loop's body is what its body port leads to: entered only by that port, left only
    through its own links (the loop's results leave by the loop's other ports)."""
    problems: list[Problem] = []
    outside = _reachable_outside_bodies(graph)
    for node_id, node in graph.nodes.items():
        loop = f"{node.type} {node_id!r}"
        for port in node.body_ports:
            entries = graph.outgoing(node_id, port)
            if len(entries) != 1:
                message = (
                    f"{loop} needs exactly one edge from its {port!r} port, to the first node of its body"
                )
                problems.append(
                    {"path": graph.paths[node_id], "message": f"{message}; it has {len(entries)}"}
                )
                continue
            # What the body reaches that the graph also reaches without any loop's body port
            # is outside the body: a link to it leaks out of the loop.
            body = [n for n in graph.reachable(entries[0].target) if n not in outside]
            if entries[0].target in outside:  # entered from outside the loop: the body is its own
                body = [entries[0].target]
            for member in body:
                for link in graph.outgoing(member):
                    if link.target not in body:
                        message = f"{member!r} is in the body of {loop} and cannot lead out of it"
                        where = f"(to {link.target!r}); results leave by the loop's ports"
                        problems.append({"path": link.path, "message": f"{message} {where}"})
                for link in graph.incoming(member):
                    if link.source not in body and link is not entries[0]:
                        message = f"{link.source!r} leads into the body of {loop} (to {member!r})"
                        problems.append(
                            {"path": link.path, "message": f"{message}; only its {port!r} port may"}
                        )
    return problems


def _reachable_outside_bodies(graph: Graph) -> set[str]:
    entry = graph.entry()
    seen = [entry] if entry is not None else []
    for node_id in seen:
        body = graph.nodes[node_id].body_ports
        for link in graph.outgoing(node_id):
            if link.port not in body and link.target not in seen:
                seen.append(link.target)
    return set(seen)


def _unproducible(graph: Graph, node: NodeSpec, incoming: list[Link], read: Path) -> str | None:
    shown = "input" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in read)
    if node.joins:
        if not read:
            return None
        by_source = {link.source: link for link in incoming}
        head = read[0]
        link = by_source.get(head) if isinstance(head, str) else None
        if link is None:
            names = ", ".join(sorted(by_source))
            return f"{{{{ {shown} }}}}: a {node.type} node sees input by predecessor id ({names})"
        return _missing(graph, link, read[1:], shown)
    for link in incoming:
        problem = _missing(graph, link, read, shown)
        if problem is not None:
            return problem
    return None


def _missing(graph: Graph, link: Link, read: Path, shown: str) -> str | None:
    source = graph.nodes[link.source]
    schema = source.port_schema(link.port)
    if can_have(schema, read):
        return None
    keys = keys_of(schema)
    sends = f"it sends {', '.join(keys)}" if keys else "it sends no fields"
    return (
        f"{{{{ {shown} }}}}: direct predecessor {link.source!r} ({source.type}) cannot produce it "
        f"on port {link.port!r}; {sends}"
    )
