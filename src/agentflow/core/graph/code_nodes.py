"""The ``run_code`` node: a short Python or JavaScript function as a step (seed 002's code node).

The code is a literal (never a template) that defines ``main(input)``; ``input`` is a template
whose value the code receives as JSON, and what ``main`` returns (JSON) is the node's output.
The worker runs it in a sandbox (``agentflow.integrations.sandbox``) within the node's
``timeout``, ``memory_mb`` and ``max_output_bytes``; the operator must switch code steps on
(``AGENTFLOW_RUN_CODE``), and a workflow with a ``run_code`` node is refused at publish until
then.

Checked at publish: the limits' bounds, and, for Python, that the code compiles and binds
``main`` at its top level (with the engine's Python; the sandbox's may be another version).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from agentflow.core.errors import ConfigError
from agentflow.core.node_specs import NodeSpec, register_node_spec

MAX_CODE = 100_000
DEFAULT_TIMEOUT = timedelta(seconds=10)
MIN_TIMEOUT = timedelta(seconds=1)
MAX_TIMEOUT = timedelta(minutes=5)
STEP_GRACE = timedelta(seconds=5)
MIN_MEMORY_MB, DEFAULT_MEMORY_MB, MAX_MEMORY_MB = 64, 256, 4096
DEFAULT_OUTPUT_BYTES, MAX_OUTPUT_BYTES = 1024 * 1024, 10 * 1024 * 1024
_MAIN_WORD = re.compile(r"\bmain\b")


class RunCodeNode(NodeSpec):
    """Run ``code``, which defines ``main(input)``, in the worker's code sandbox: ``input``
    (a template, by default the previous node's output) goes in as JSON, and the JSON value
    ``main`` returns is the output. Python sees its standard library, JavaScript Node.js's
    modules; neither sees the network, the worker's files or its environment. A limit passed
    fails the step (``code_timeout``, ``code_memory_exceeded``, ``code_output_too_large``), as
    does an exception (``code_failed``, with the end of what the code printed); none is
    retried, and each can go down ``error``."""

    title: ClassVar[str] = "Run code"
    literal_fields: ClassVar[frozenset[str]] = frozenset(
        {"language", "code", "memory_mb", "max_output_bytes"}
    )

    type: Literal["run_code"] = "run_code"
    language: Literal["python", "javascript"] = Field(
        default="python", description="python, or javascript (on workers with Node.js)."
    )
    code: str = Field(
        min_length=1,
        max_length=MAX_CODE,
        description="The code (not a template): it defines main(input) and returns a JSON value.",
    )
    input: Any = Field(default="{{ input }}", description="What main receives (a template; JSON).")
    memory_mb: int = Field(
        default=DEFAULT_MEMORY_MB,
        ge=MIN_MEMORY_MB,
        le=MAX_MEMORY_MB,
        description="Data memory of each of the code's processes, in MiB.",
    )
    max_output_bytes: int = Field(
        default=DEFAULT_OUTPUT_BYTES,
        ge=1,
        le=MAX_OUTPUT_BYTES,
        description="The largest result, as JSON bytes; what it prints may take as much, or 1 MiB.",
    )

    @field_validator("timeout")
    @classmethod
    def _bounded_timeout(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and not MIN_TIMEOUT <= value <= MAX_TIMEOUT:
            raise ValueError("a run_code node's timeout must be from 1 second to 5 minutes")
        return value

    @model_validator(mode="after")
    def _defines_main(self) -> RunCodeNode:
        problem = python_problem(self.code) if self.language == "python" else None
        if self.language == "javascript" and not _MAIN_WORD.search(self.code):
            problem = "the code defines no function main(input)"
        if problem is not None:
            raise ValueError(problem)
        return self

    def time_limit(self) -> timedelta:
        """How long the code may run: the node's ``timeout``, or 10 seconds."""
        return self.timeout or DEFAULT_TIMEOUT

    def step_limit(self) -> timedelta:
        """The code's time limit and a grace to start the sandbox, and to kill it and say why
        (``code_timeout`` rather than ``step_timeout``)."""
        return self.time_limit() + STEP_GRACE


def python_problem(code: str) -> str | None:
    """Why ``code`` cannot serve as a Python ``run_code`` node's code, else None: it does not
    compile, or nothing at its top level is named ``main``."""
    try:
        tree = ast.parse(code, "<code>")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        where = f" at line {exc.lineno}" if isinstance(exc, SyntaxError) and exc.lineno else ""
        reason = exc.msg if isinstance(exc, SyntaxError) else str(exc) or type(exc).__name__
        return f"the code is not valid Python{where}: {reason}"
    if not any(_binds_main(statement) for statement in tree.body):
        return "the code defines no function main(input) at its top level"
    return None


def _binds_main(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return statement.name == "main"
    if isinstance(statement, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == "main" for t in statement.targets)
    if isinstance(statement, ast.AnnAssign):
        return isinstance(statement.target, ast.Name) and statement.target.id == "main"
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return any((alias.asname or alias.name) == "main" for alias in statement.names)
    return False


def refuse_code_steps(nodes: Sequence[NodeSpec]) -> None:
    """Refuse a graph with ``run_code`` nodes, for an engine whose operator has not switched
    code steps on.

    Raises:
        ConfigError: code ``run_code_disabled``; ``details['errors']`` names each node's path.
    """
    paths = [f"nodes[{index}].type" for index, node in enumerate(nodes) if isinstance(node, RunCodeNode)]
    if paths:
        message = "run_code nodes are off on this engine (AGENTFLOW_RUN_CODE is off)"
        raise ConfigError(
            "run_code_disabled",
            f"{message}: {', '.join(paths)}",
            details={"errors": [{"path": path, "message": message} for path in paths]},
            solution="Ask the operator to set AGENTFLOW_RUN_CODE=on (or isolated) on the API server "
            "and the workers, after reading what the sandbox stops (docs/security.md, Code steps); "
            "or do the work in a tool or an http_request node.",
        )


register_node_spec(RunCodeNode)


def needs_code(document: object) -> bool:
    """Whether a stored version document needs a worker that runs code: a ``run_code`` node
    anywhere in it, as migration 0032's ``workflow_versions.needs_code`` decides."""
    if isinstance(document, dict):
        return document.get("type") == "run_code" or any(needs_code(v) for v in document.values())
    if isinstance(document, list):
        return any(needs_code(v) for v in document)
    return False
