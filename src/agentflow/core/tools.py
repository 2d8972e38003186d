"""The registry of Python tools that steps (and later agents) call."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from agentflow.core.durations import parse_duration
from agentflow.core.errors import StepFailure
from agentflow.core.frozen import frozen
from agentflow.core.step_context import StepContext

F = TypeVar("F", bound=Callable[..., Any])


@frozen
class ToolSpec:
    """A registered tool.

    Attributes:
        name: the name configs refer to.
        fn: the function; sync functions run in a thread, async ones on the loop.
        description: from the docstring; shown to models.
        args_model: validates arguments; its JSON schema describes the tool.
        wants_context: whether ``fn`` takes ``ctx: StepContext``.
        timeout: overrides the node's timeout when set.
        side_effecting: whether calling it changes the world (used by approvals).
    """

    name: str
    fn: Callable[..., Any]
    description: str
    args_model: type[BaseModel]
    wants_context: bool
    timeout: timedelta | None
    side_effecting: bool

    @functools.cached_property
    def is_async(self) -> bool:
        """True for ``async def`` tools (asked on every call: computed once)."""
        return inspect.iscoroutinefunction(self.fn)

    @functools.cached_property
    def _parameters(self) -> tuple[str, ...]:
        # Read once: pydantic's ``model_fields`` is a descriptor that builds its answer per read.
        return tuple(self.args_model.model_fields)

    def validate_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """Check arguments against the signature.

        Raises:
            StepFailure: code ``invalid_tool_args`` (not retryable) listing each problem.
        """
        if not args and not self._parameters:  # nothing to check: a tool without parameters
            return {}
        try:
            model = self.args_model.model_validate(args)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(args)'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            raise StepFailure(
                "invalid_tool_args",
                f"arguments for tool {self.name!r} are invalid: {problems}",
                retryable=False,
                solution="Fix the node's args to match the tool's parameters.",
            ) from None
        return {name: getattr(model, name) for name in self._parameters}


class ToolRegistry:
    """Tools by name."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolSpec] = {}

    def register(self, spec: ToolSpec) -> None:
        """Add or replace a tool."""
        self._tools[spec.name] = spec

    def get(self, name: str) -> ToolSpec:
        """Return the tool called ``name``.

        Raises:
            StepFailure: code ``unknown_tool`` (not retryable).
        """
        try:
            return self._tools[name]
        except KeyError:
            raise StepFailure(
                "unknown_tool",
                f"no tool named {name!r} is registered in this worker",
                retryable=False,
                solution="Import the module that defines it (agentflow worker --import MODULE "
                "or AGENTFLOW_IMPORTS).",
            ) from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._tools)


default_registry = ToolRegistry()


@overload
def tool(fn: F) -> F: ...
@overload
def tool(
    *,
    name: str | None = None,
    timeout: str | float | None = None,
    side_effecting: bool = False,
    registry: ToolRegistry | None = None,
) -> Callable[[F], F]: ...
def tool(
    fn: F | None = None,
    *,
    name: str | None = None,
    timeout: str | float | None = None,
    side_effecting: bool = False,
    registry: ToolRegistry | None = None,
) -> F | Callable[[F], F]:
    """Register a function as a tool, sync or async.

    A parameter named ``ctx`` (or annotated ``StepContext``) receives the step context;
    the other parameters are the tool's arguments, validated from their annotations.

    Example:
        >>> @tool
        ... async def greet(name: str) -> dict[str, str]:
        ...     return {"greeting": f"hello {name}"}
    """

    def register(func: F) -> F:
        spec = build_spec(
            func,
            name=name,
            timeout=None if timeout is None else parse_duration(timeout),
            side_effecting=side_effecting,
        )
        (registry or default_registry).register(spec)
        return func

    return register(fn) if fn is not None else register


def build_spec(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    timeout: timedelta | None = None,
    side_effecting: bool = False,
) -> ToolSpec:
    """Describe ``fn`` as a ``ToolSpec`` (arguments model from its signature)."""
    fields: dict[str, Any] = {}
    wants_context = False
    for param in inspect.signature(fn, eval_str=True).parameters.values():
        if param.name == "ctx" or param.annotation is StepContext:
            wants_context = True
            continue
        annotation = Any if param.annotation is inspect.Parameter.empty else param.annotation
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    args_model = create_model(f"{fn.__name__}_args", __config__=ConfigDict(extra="forbid"), **fields)
    return ToolSpec(
        name=name or fn.__name__,
        fn=fn,
        description=inspect.getdoc(fn) or "",
        args_model=args_model,
        wants_context=wants_context,
        timeout=timeout,
        side_effecting=side_effecting,
    )
