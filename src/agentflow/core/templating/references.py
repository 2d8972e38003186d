"""Find what a template reads from a name (``{{ input.customer.email }}`` reads
``("customer", "email")`` from ``input``), so publishing can check it against what the
predecessors produce.

Only static paths are found: attribute access and constant subscripts
(``input["a"][0]``). A dynamic subscript (``input[key]``) ends the path where it starts; a
method call (``input.get("x")``) is not a key. A template that does not parse reads nothing
here (compiling it reports the problem).
"""

from __future__ import annotations

from typing import Any

from jinja2 import TemplateSyntaxError, nodes

from agentflow.core.templating.sandbox import BoundedEnvironment

_ENV = BoundedEnvironment()

Path = tuple[str | int, ...]


def read_paths(text: str, name: str) -> list[Path]:
    """Every static path ``text`` reads below ``name``, in order (``()``: the name itself)."""
    if "{{" not in text and "{%" not in text:
        return []
    try:
        tree = _ENV.parse(text)
    except (TemplateSyntaxError, RecursionError):
        return []
    found: list[Path] = []
    _visit(tree, name, found)
    return found


def template_reads(value: Any, name: str, path: str) -> list[tuple[str, Path]]:
    """Every ``(config path, read path)`` in the templates inside ``value`` (through lists and
    dicts), like ``("nodes[2].args.to", ("customer", "email"))``."""
    if isinstance(value, str):
        return [(path, read) for read in read_paths(value, name)]
    if isinstance(value, list):
        return [r for i, item in enumerate(value) for r in template_reads(item, name, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [r for key, item in value.items() for r in template_reads(item, name, f"{path}.{key}")]
    return []


def _visit(node: nodes.Node, name: str, found: list[Path]) -> None:
    if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr):
        # ``input.get("x")``: ``get`` is a method, so the path is what it is called on.
        method = _chain(node.node.node, name)
        if method is not None:
            found.append(method)
            for child in (*node.args, *node.kwargs):
                _visit(child, name, found)
            return
    chain = _chain(node, name)
    if chain is not None:
        found.append(chain)
        return
    for child in node.iter_child_nodes():
        _visit(child, name, found)


def _chain(node: nodes.Node, name: str) -> Path | None:
    parts: list[str | int] = []
    while True:
        if isinstance(node, nodes.Getattr):
            parts.append(node.attr)
            node = node.node
        elif (
            isinstance(node, nodes.Getitem)
            and isinstance(node.arg, nodes.Const)
            and isinstance(node.arg.value, str | int)
            and not isinstance(node.arg.value, bool)
        ):
            parts.append(node.arg.value)
            node = node.node
        elif isinstance(node, nodes.Name) and node.name == name and node.ctx == "load":
            return tuple(reversed(parts))
        else:
            return None
