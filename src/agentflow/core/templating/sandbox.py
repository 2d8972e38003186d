"""The Jinja environment workflow templates run in: sandboxed, immutable, and bounded.

On top of Jinja's immutable sandbox (no private attributes, no mutation of lists and
dicts), every operation that can build something big or run for long goes through a guard
(:mod:`.guards`, :mod:`.filters`) and the render's meter (:mod:`.meter`):

- every arithmetic operator is intercepted (so none is folded at compile time either);
- every call is checked: string methods that pad, repeat or replace, ``format``, ``join``;
- the compiled tree is rewritten so that ``for`` loops, ``~`` concatenation and list, tuple
  and dict literals pass through the guards too;
- ``{% include %}``, ``{% import %}`` and ``{% extends %}`` are refused: a workflow template
  stands alone.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Iterator
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace
from jinja2.visitor import NodeTransformer

from agentflow.core.templating import guards
from agentflow.core.templating.filters import guarded_filters
from agentflow.core.templating.meter import TemplateLimitError, current
from agentflow.core.templating.weight import ensure_small, refuse_over

_STANDALONE = (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)
_LOREM_WORDS = 100_000


class _Guards(Extension):
    """Where the rewritten tree finds its guards (an extension attribute cannot be shadowed
    by a template variable, unlike a global)."""

    @staticmethod
    def loop_items(iterable: Iterable[Any]) -> Iterator[Any]:
        """The items of a ``for`` loop, each counted on the render's meter."""
        meter = current()
        for item in iterable:
            meter.tick()
            yield item

    @staticmethod
    def concat(*parts: Any) -> str:
        """``a ~ b ~ ...``, refused when the result would be too long."""
        size = sum(guards.check_stringify(part, "'~'") for part in parts)
        refuse_over(size, "'~'")
        current().charge(size)
        return "".join(str(part) for part in parts)

    @staticmethod
    def built(value: Any) -> Any:
        """A list, tuple or dict literal, refused when writing it out would be too long."""
        current().charge(ensure_small(value, "a list or dict literal"))
        return value


_GUARD_ID = _Guards.identifier


class _Rewrite(NodeTransformer):
    """Route loops, concatenations and literals through :class:`_Guards`."""

    def _guard(self, name: str, args: list[nodes.Expr], lineno: int) -> nodes.Call:
        target = nodes.ExtensionAttribute(_GUARD_ID, name, lineno=lineno)
        return nodes.Call(target, args, [], None, None, lineno=lineno)

    def visit_For(self, node: nodes.For) -> nodes.Node:  # noqa: N802 (Jinja's visitor names)
        self.generic_visit(node)
        node.iter = self._guard("loop_items", [node.iter], node.lineno)  # type: ignore[list-item]
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:  # noqa: N802
        self.generic_visit(node)
        return self._guard("concat", list(node.nodes), node.lineno)

    def _literal(self, node: nodes.Expr) -> nodes.Node:
        self.generic_visit(node)
        if getattr(node, "ctx", "load") != "load":
            return node  # an assignment target: {% set a, b = ... %}
        return self._guard("built", [node], node.lineno)

    visit_List = _literal  # noqa: N815
    visit_Tuple = _literal  # noqa: N815
    visit_Dict = _literal  # noqa: N815


def _finalize(value: Any) -> Any:
    """Every ``{{ value }}`` a text template writes out, weighed before it becomes text."""
    current().charge(guards.check_stringify(value, "the value written out"))
    return value


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox with limits. Dot access prefers keys: ``payload.items`` is the payload's
    "items" field, not the dict method (workflow data is JSON, so keys are what people mean)."""

    intercepted_binops = frozenset(guards.BINOPS)

    def __init__(self) -> None:
        super().__init__(
            undefined=StrictUndefined,
            autoescape=False,
            optimized=False,  # no folding at compile time: every operation meets its guard
            finalize=_finalize,
            extensions=[_Guards],
        )
        self.filters = guarded_filters(self.filters)

    def getattr(self, obj: Any, attribute: str) -> Any:
        """``obj.attribute``: a dict's key first, then the sandbox's attribute rules."""
        if isinstance(obj, dict) and attribute in obj:
            return obj[attribute]
        return super().getattr(obj, attribute)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        """Every arithmetic operator: refused before it runs when the result would be too big."""
        current().tick()
        guards.check_binop(operator, left, right)
        result = guards.BINOPS[operator](left, right)
        if isinstance(result, str | list | tuple | bytes):
            current().charge(len(result))
        return result

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        """Every call from a template, checked when it can build something big."""
        meter = current()
        meter.tick()
        owner = getattr(__obj, "__self__", None)
        if isinstance(__obj, types.BuiltinMethodType) and isinstance(owner, str | bytes):
            if __obj.__name__ == "join" and len(args) == 1:
                items = list(args[0])
                meter.charge(len(items))
                guards.check_join(items, owner)
                args = (items,)
            else:
                guards.check_str_method(owner, __obj.__name__, args, kwargs)
        elif __obj.__class__ is types.FunctionType and __obj.__name__ in ("format", "format_map"):
            template = getattr(getattr(__obj, "__wrapped__", None), "__self__", None)
            if isinstance(template, str):
                if __obj.__name__ == "format_map" and args:
                    guards.check_str_format(template, (), args[0])
                else:
                    guards.check_str_format(template, args, kwargs)
        elif __obj is __self.globals.get("lipsum"):
            _check_lorem(args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        if __obj is dict or __obj is Namespace or getattr(__obj, "__name__", "") == "fromkeys":
            meter.charge(ensure_small(result, "the new dict"))
        elif isinstance(result, str | list | tuple | bytes):
            meter.charge(len(result))
        return result

    def _generate(
        self, source: nodes.Template, name: str | None, filename: str | None, defer_init: bool = False
    ) -> str:
        for node in source.find_all(_STANDALONE):
            kind = type(node).__name__.lower().replace("fromimport", "from ... import")
            raise TemplateSyntaxError(
                f"{{% {kind} %}} is not available: a workflow template stands alone", node.lineno
            )
        rewritten = _Rewrite().visit(source)
        assert isinstance(rewritten, nodes.Template)
        return super()._generate(rewritten, name, filename, defer_init)


def _check_lorem(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    names = ("n", "html", "min", "max")
    given = dict(zip(names, args, strict=False)) | kwargs
    paragraphs, longest = given.get("n", 5), given.get("max", 100)
    if isinstance(paragraphs, int) and isinstance(longest, int) and paragraphs * longest > _LOREM_WORDS:
        raise TemplateLimitError(f"lipsum of more than {_LOREM_WORDS:,} words")
