"""Render ``{{ ... }}`` templates in workflow values with the bounded sandbox.

A string that is one expression and nothing else (``"{{ payload.count }}"``) renders to
the expression's value with its type kept; any other string renders to text. A template
that fails names where it is (the node and field) and fails with a stable code:
``template_error`` for a mistake in it, ``template_limit`` when it tried to use more than
its limits (:mod:`.meter`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from jinja2 import Template, TemplateError, Undefined

from agentflow.core.errors import StepFailure
from agentflow.core.templating.meter import (
    MAX_SIZE,
    MAX_TEMPLATE_CHARS,
    RenderDeferred,
    TemplateLimitError,
    current,
    deferrable,
    metering,
)
from agentflow.core.templating.sandbox import BoundedEnvironment

_ENV = BoundedEnvironment()
_SOLE_EXPRESSION = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\}\}).)+)\}\}\s*$", re.DOTALL)
_INLINE_COMPILE_CHARS = 2_000
"""Longer templates are compiled where a render may take its time (see ``deferring``)."""

Compiled = tuple[Template | None, Callable[..., Any] | None]
_CACHE: dict[str, Compiled] = {}
_CACHE_SIZE = 4096


def render(
    value: Any, context: Mapping[str, Any], *, field: str = "template", node: str | None = None
) -> Any:
    """Render every template inside ``value`` (recursively through lists and dicts).

    Args:
        value: a config value: a string, a list or a dict (other values are kept).
        context: the names templates see (``payload``, ``steps``, ``state``, ...).
        field: the value's name in its config, for errors (``args``, ``output``, ...).
        node: the node it belongs to, for errors.

    Raises:
        StepFailure: ``template_error`` or ``template_limit``, not retryable, naming the
            node, the field and the template.
        RenderDeferred: inside ``deferring()``, when the render ran past its inline time.
    """
    where = field if node is None else f"node {node!r} field {field}"
    with metering():
        return _render(value, context, where)


def has_templates(value: Any) -> bool:
    """Whether ``value`` holds any template (through lists and dicts): one that holds none
    renders to a copy of itself, which callers may make without a render's bookkeeping."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, list):
        return any(has_templates(item) for item in value)
    if isinstance(value, dict):
        return any(has_templates(item) for item in value.values())
    return False


def copied(value: Any) -> Any:
    """A copy of a value without templates, as ``render`` would give it (new lists and dicts)."""
    if isinstance(value, list):
        return [copied(item) for item in value]
    if isinstance(value, dict):
        return {key: copied(item) for key, item in value.items()}
    return value


def _render(value: Any, context: Mapping[str, Any], where: str) -> Any:
    if isinstance(value, str):
        return _render_text(value, context, where) if "{{" in value or "{%" in value else value
    if isinstance(value, list):
        return [_render(item, context, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        return {key: _render(item, context, f"{where}.{key}") for key, item in value.items()}
    return value


def template_problem(text: str) -> str | None:
    """Why ``text`` cannot be a template (a syntax error, a refused tag), or None."""
    try:
        _compiled(text)
    except (TemplateError, TemplateLimitError, RecursionError) as exc:
        return str(exc)
    return None


def template_problems(value: Any, path: str) -> list[dict[str, str]]:
    """Every template inside ``value`` (through lists and dicts) that cannot compile, as
    ``{"path", "message"}`` entries like a config error's (``nodes[0].args.to``)."""
    if isinstance(value, str):
        problem = template_problem(value) if "{{" in value or "{%" in value else None
        return [] if problem is None else [{"path": path, "message": f"template: {problem}"}]
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in template_problems(item, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in template_problems(item, f"{path}.{key}")]
    return []


def _compiled(text: str) -> Compiled:
    # Compiling is most of a render's cost; configs are immutable, so compile each text once.
    found = _CACHE.get(text)
    if found is not None:
        return found
    if len(text) > MAX_TEMPLATE_CHARS:
        raise TemplateLimitError(f"templates are at most {MAX_TEMPLATE_CHARS:,} characters long")
    if deferrable() and len(text) > _INLINE_COMPILE_CHARS:
        raise RenderDeferred()
    match = _SOLE_EXPRESSION.match(text)
    if match is None:
        template: Template | None = _ENV.from_string(text)
        compiled: Compiled = (template, None)
    else:
        expression = _ENV.compile_expression(match.group("expr").strip(), undefined_to_none=False)
        template = getattr(expression, "_template", None)  # what renders it, in Jinja 2 and 3
        compiled = (None, expression)
    if template is not None:
        # Jinja keeps a template's globals as a ChainMap over the environment's and copies it
        # into a dict at every render (40 % of a short render); ours never change: copy once.
        template.globals = dict(template.globals)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.clear()
    _CACHE[text] = compiled
    return compiled


def _render_text(text: str, context: Mapping[str, Any], where: str) -> Any:
    try:
        template, expression = _compiled(text)
        if template is not None:
            return _write_out(template, context)
        assert expression is not None
        value = expression(**context)
        if isinstance(value, Undefined):
            value._fail_with_undefined_error()  # StrictUndefined: raises UndefinedError
        return _as_data(value)
    except RenderDeferred:
        raise
    except (TemplateLimitError, RecursionError, MemoryError) as exc:
        reason = str(exc) if isinstance(exc, TemplateLimitError) else "it nested or recursed too deeply"
        raise _failure("template_limit", where, text, f"hit a limit: {reason}") from None
    except Exception as exc:  # a template error, or any error an operation raised (1/0)
        raise _failure("template_error", where, text, f"failed: {_describe(exc)}") from None


def _as_data(value: Any) -> Any:
    """A lazy sequence (``range``, a ``map`` filter's result) as the list it stands for."""
    if not isinstance(value, range | Iterator):
        return value
    meter = current()
    items: list[Any] = []
    for item in value:
        items.append(item)
        meter.tick()
        if len(items) > MAX_SIZE:
            raise TemplateLimitError(f"a list of more than {MAX_SIZE:,} items")
    meter.charge(len(items))
    return items


def _write_out(template: Template, context: Mapping[str, Any]) -> str:
    parts: list[str] = []
    size = 0
    for part in template.generate(**context):
        size += len(part)
        if size > MAX_SIZE:
            raise TemplateLimitError(f"its output would be more than {MAX_SIZE:,} characters long")
        parts.append(part)
    return "".join(parts)


def _describe(exc: Exception) -> str:
    if isinstance(exc, TemplateError):
        return str(exc.message if exc.message is not None else exc)
    return f"{type(exc).__name__}: {exc}"


def _failure(code: str, where: str, text: str, what: str) -> StepFailure:
    shown = text if len(text) <= 200 else text[:199] + "…"
    solutions = {
        "template_limit": "Make the template build less: smaller repeats, powers and strings, fewer loops.",
        "template_error": "Check the names used in the template against payload, steps, state and run.",
    }
    return StepFailure(
        code,
        f"{where}: the template {shown!r} {what}",
        retryable=False,
        details={"field": where, "template": shown},
        solution=solutions[code],
    )
