"""Render ``{{ ... }}`` templates in node arguments with a sandboxed Jinja environment.

A string that is one expression and nothing else (``"{{ payload.count }}"``) renders to
the expression's value with its type kept; any other string renders to text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateError, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from agentflow.core.errors import StepFailure


class _DataEnvironment(ImmutableSandboxedEnvironment):
    """Dot access prefers keys: ``payload.items`` is the payload's "items" field, not the
    dict method (workflow data is JSON, so keys are what people mean)."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, dict) and attribute in obj:
            return obj[attribute]
        return super().getattr(obj, attribute)


_ENV = _DataEnvironment(undefined=StrictUndefined, autoescape=False)
_SOLE_EXPRESSION = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\}\}).)+)\}\}\s*$", re.DOTALL)


def render(value: Any, context: dict[str, Any]) -> Any:
    """Render every template inside ``value`` (recursively through lists and dicts).

    Raises:
        StepFailure: code ``template_error``, not retryable, naming the template.
    """
    if isinstance(value, str):
        return _render_text(value, context) if "{{" in value or "{%" in value else value
    if isinstance(value, list):
        return [render(item, context) for item in value]
    if isinstance(value, dict):
        return {key: render(item, context) for key, item in value.items()}
    return value


@lru_cache(maxsize=4096)
def _compile(text: str) -> tuple[Template | None, Callable[..., Any] | None]:
    # Compiling is most of a render's cost; configs are immutable, so compile each text once.
    match = _SOLE_EXPRESSION.match(text)
    if match is None:
        return _ENV.from_string(text), None
    return None, _ENV.compile_expression(match.group("expr").strip(), undefined_to_none=False)


def _render_text(text: str, context: dict[str, Any]) -> Any:
    try:
        template, expression = _compile(text)
        if template is not None:
            return template.render(**context)
        assert expression is not None
        value = expression(**context)
        if isinstance(value, Undefined):
            value._fail_with_undefined_error()  # StrictUndefined: raises UndefinedError
        return value
    except TemplateError as exc:
        raise StepFailure(
            "template_error",
            f"template {text!r} failed: {exc}",
            retryable=False,
            solution="Check the names used in the template against payload, steps, state and run.",
        ) from None
