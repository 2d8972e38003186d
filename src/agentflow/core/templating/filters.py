"""Jinja's filters, each behind a guard: a size check before it runs and a charge after.

The guard finds the filter's arguments by name (Jinja passes the context, the environment
or the eval context first to some filters), so a check reads ``width`` or ``fill_with``
whatever way the template passed it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from jinja2 import Environment, pass_environment
from jinja2.filters import make_attrgetter
from jinja2.nodes import EvalContext
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment

from agentflow.core.templating import guards
from agentflow.core.templating.meter import MAX_SIZE, TemplateLimitError, current
from agentflow.core.templating.weight import refuse_over, weigh

Check = Callable[[dict[str, Any]], None]

_LONG_TEXT = 100_000
"""The longest text the slow, pure-Python filters (``wordwrap``, ``urlize``) take."""

_STRINGIFYING = (
    "string", "pprint", "e", "escape", "forceescape", "urlencode", "striptags", "title", "upper",
    "lower", "capitalize", "trim", "wordcount", "truncate", "safe", "xmlattr", "filesizeformat",
)  # fmt: skip


def _width(name: str) -> Check:
    def check(args: dict[str, Any]) -> None:
        width = args.get(name)
        if isinstance(width, int) and width > MAX_SIZE:
            raise TemplateLimitError(f"a {name} of {width:,} is over {MAX_SIZE:,}")

    return check


def _indent(args: dict[str, Any]) -> None:
    text, width = str(args.get("s", "")), args.get("width", 4)
    pad = width if isinstance(width, int) else len(str(width))
    refuse_over(len(text) + (text.count("\n") + 1) * max(pad, 0), "indent")


def _long_text(args: dict[str, Any]) -> None:
    value = args.get("s", args.get("value"))
    if weigh(value, _LONG_TEXT) > _LONG_TEXT:
        raise TemplateLimitError(f"this filter takes text of at most {_LONG_TEXT:,} characters")


def _wordwrap(args: dict[str, Any]) -> None:
    _long_text(args)
    text, width, wrap = str(args.get("s", "")), args.get("width", 79), args.get("wrapstring")
    lines = len(text) // max(width if isinstance(width, int) else 1, 1) + 1
    refuse_over(len(text) + lines * len(str(wrap or "\n")), "wordwrap")


def _format(args: dict[str, Any]) -> None:
    guards.check_percent_format(str(args.get("value", "")), args.get("kwargs") or args.get("args") or ())


def _replace(args: dict[str, Any]) -> None:
    guards.check_replace(str(args.get("s", "")), args.get("old"), args.get("new"), args.get("count"))


def _fill(count_name: str) -> Check:
    def check(args: dict[str, Any]) -> None:
        count = args.get(count_name)
        if isinstance(count, int) and count > MAX_SIZE:
            raise TemplateLimitError(f"a {count_name} of {count:,} is over {MAX_SIZE:,}")
        fill = args.get("fill_with")
        if fill is not None and isinstance(count, int):
            refuse_over(weigh(fill) * count, "fill_with")

    return check


def _tojson(args: dict[str, Any]) -> None:
    indent = args.get("indent")
    if isinstance(indent, int) and indent > 16:
        raise TemplateLimitError("tojson indents by at most 16")
    guards.check_stringify(args.get("value"), "tojson")


_CHECKS: dict[str, Check] = {
    "center": _width("width"),
    "indent": _indent,
    "wordwrap": _wordwrap,
    "urlize": _long_text,
    "format": _format,
    "replace": _replace,
    "batch": _fill("linecount"),
    "slice": _fill("slices"),
    "tojson": _tojson,
}


def _stringify(args: dict[str, Any]) -> None:
    for value in args.values():
        if not isinstance(value, Context | EvalContext | Environment):
            guards.check_stringify(value, "the filter's text")


def _charge(result: Any) -> Any:
    if isinstance(result, str | list | tuple | bytes):
        current().charge(len(result))
    else:
        current().tick()
    return result


_PASSED = (Context, EvalContext, Environment)
_PASSED_NAMES = ("context", "eval_ctx", "environment", "env")


def _guard(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    check = _CHECKS.get(name) or (_stringify if name in _STRINGIFYING else None)
    signature = inspect.signature(fn)
    first = next(iter(signature.parameters), "")

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if check is not None:
            # Jinja may pass a context first that the filter's own signature does not name (a
            # filter with both a sync and an async variant is called with the eval context).
            passed = bool(args) and isinstance(args[0], _PASSED) and first not in _PASSED_NAMES
            try:
                bound = signature.bind(*args[1:] if passed else args, **kwargs)
            except TypeError:
                return fn(*args, **kwargs)  # wrong arguments: the filter raises its own error
            check(bound.arguments)
        return _charge(fn(*args, **kwargs))

    return guarded


@pass_environment
def _join(environment: SandboxedEnvironment, value: Any, d: str = "", attribute: Any = None) -> str:
    items = list(value)
    current().charge(len(items))
    if attribute is not None:
        items = [make_attrgetter(environment, attribute)(item) for item in items]
    guards.check_join(items, d)
    return _charge(str(d).join(str(item) for item in items))  # type: ignore[no-any-return]


@pass_environment
def _sum(environment: SandboxedEnvironment, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
    items = list(iterable)
    current().charge(len(items))
    if attribute is not None:
        items = [make_attrgetter(environment, attribute)(item) for item in items]
    for value in (start, *items):
        if not isinstance(value, int | float):
            raise TemplateLimitError("sum adds numbers only")
    return sum(items, start)


@pass_environment
def _list(environment: SandboxedEnvironment, value: Any) -> list[Any]:
    if isinstance(value, str):
        refuse_over(len(value), "list")
    items: list[Any] = []
    for item in value:
        items.append(item)
        current().tick()
        if len(items) > MAX_SIZE:
            raise TemplateLimitError(f"a list of more than {MAX_SIZE:,} items")
    current().charge(len(items))
    return items


def guarded_filters(filters: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """``filters`` with every one behind its guard (``join``, ``sum`` and ``list`` replaced)."""
    table = {name: _guard(name, fn) for name, fn in filters.items()}
    table.update(join=_join, sum=_sum, list=_list)
    return table
