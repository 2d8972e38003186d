"""The ``run_code`` node: run a short Python or JavaScript function in the worker's code sandbox
(spec in ``agentflow.core.graph.code_nodes``; the sandbox in ``agentflow.integrations.sandbox``).

Each attempt renders ``input``, runs the code once within the node's limits and passes on what
``main`` returned. How the sandbox says it ended becomes a step error code with a solution;
none of them is retried (the same code on the same input ends the same way) except a sandbox
that could not be set up, and each can go down the node's ``error`` port.
"""

from __future__ import annotations

from typing import Any

from agentflow.core.errors import StepFailure
from agentflow.core.graph.code_nodes import MAX_MEMORY_MB, MAX_OUTPUT_BYTES, RunCodeNode
from agentflow.core.node_specs import NodeSpec
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.integrations.sandbox import CodeLimits, Outcome, Verdict
from agentflow.integrations.sandbox.outcome import MiB
from agentflow.nodes.base import BaseRunner, NodeEnv

LOG_CHARS = 2000
"""How much of the end of what the code printed an error carries."""


class RunCodeRunner(BaseRunner):
    """Render the input, run the code in the sandbox, pass on its result."""

    kind = "run_code"

    def describe(self, node: NodeSpec) -> str | None:
        """The language."""
        assert isinstance(node, RunCodeNode)
        return node.language

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """What ``main`` returned is the output; the rendered input and the sandbox's tier are
        the step's input."""
        assert isinstance(node, RunCodeNode)
        if env.code is None:
            raise StepFailure(
                "run_code_disabled",
                f"run_code node {node.id!r}: code steps are off on this worker",
                retryable=False,
                details={"node": node.id},
                solution="Set AGENTFLOW_RUN_CODE=on (or isolated) on the workers, knowing what the "
                "sandbox does and does not stop (docs/security.md, Code steps); or remove the node.",
            )
        value = await env.render(node.input, node.id, "input")
        limits = CodeLimits(
            timeout=node.time_limit().total_seconds(),
            memory_bytes=node.memory_mb * MiB,
            max_output_bytes=node.max_output_bytes,
            max_log_bytes=max(MiB, node.max_output_bytes),
        )
        outcome = await env.code.run(node.language, node.code, value, limits)
        if outcome.verdict is not Verdict.OK:
            raise failure(node, outcome, limits)
        step_input = {
            "language": node.language,
            "input": value,
            "sandbox": outcome.isolation.get("tier"),
            "cgroup": bool(outcome.isolation.get("cgroup")),  # one memory limit for all its processes
        }
        return step_input, NodeResult(output=outcome.value)


def failure(node: RunCodeNode, outcome: Outcome, limits: CodeLimits) -> StepFailure:
    """The step error for an execution that did not return a result."""
    code, message, solution = _EXPLAINED[outcome.verdict](node, outcome, limits)
    details: dict[str, Any] = {"node": node.id, "language": node.language}
    if outcome.log:
        details["log"] = outcome.log[-LOG_CHARS:]
    if outcome.detail:
        details["reason"] = outcome.detail
    if outcome.isolation.get("tier"):
        details["sandbox"] = outcome.isolation["tier"]
    return StepFailure(
        code,
        f"run_code node {node.id!r}: {message}",
        retryable=outcome.verdict is Verdict.SETUP_FAILED,
        details=details,
        solution=solution,
    )


def _last_line(outcome: Outcome) -> str:
    lines = [line for line in outcome.log.splitlines() if line.strip()]
    return f": {lines[-1].strip()[:300]}" if lines else ""


_Explained = tuple[str, str, str]


def _timeout(node: RunCodeNode, outcome: Outcome, limits: CodeLimits) -> _Explained:
    spent = "its CPU time" if outcome.detail == "CPU time" else "its time"
    return (
        "code_timeout",
        f"the code did not finish within {limits.timeout:g}s and was stopped ({spent} ran out)",
        "Make the code faster, or raise the node's 'timeout' (at most 5 minutes).",
    )


def _memory(node: RunCodeNode, outcome: Outcome, limits: CodeLimits) -> _Explained:
    return (
        "code_memory_exceeded",
        f"the code needed more than its {node.memory_mb} MiB of memory",
        f"Use less memory (work through the input in parts), or raise 'memory_mb' (at most {MAX_MEMORY_MB}).",
    )


def _output(node: RunCodeNode, outcome: Outcome, limits: CodeLimits) -> _Explained:
    if outcome.detail == "stderr":
        return (
            "code_output_too_large",
            f"the code printed more than {limits.max_log_bytes:,} bytes and was stopped",
            "Print less: what the code prints is only a log; return the data from main instead.",
        )
    return (
        "code_output_too_large",
        f"main's result is over max_output_bytes ({limits.max_output_bytes:,} bytes as JSON)",
        f"Return less (a summary, or only the fields later nodes use), or raise 'max_output_bytes' "
        f"(at most {MAX_OUTPUT_BYTES:,}).",
    )


def _input(node: RunCodeNode, outcome: Outcome, limits: CodeLimits) -> _Explained:
    return (
        "code_input_too_large",
        f"the code and its input take {outcome.detail}, over the 8 MiB a code step takes",
        "Pass the code only the part of the data it needs ('input').",
    )


def _failed(node: RunCodeNode, outcome: Outcome, limits: CodeLimits) -> _Explained:
    return (
        "code_failed",
        f"the code failed ({outcome.detail}){_last_line(outcome)}",
        "Fix the code: the end of what it printed, and its traceback, are in details.log.",
    )


def _not_json(node: RunCodeNode, outcome: Outcome, limits: CodeLimits) -> _Explained:
    reason = _last_line(outcome) or f": {outcome.detail}"
    return (
        "code_result_invalid",
        f"main did not return a JSON value{reason}",
        "Return only JSON values from main: objects, lists, strings, finite numbers, booleans and "
        "null; write nothing yourself to stdout (print goes to the log).",
    )


def _no_main(node: RunCodeNode, outcome: Outcome, limits: CodeLimits) -> _Explained:
    return (
        "code_invalid",
        f"the code does not compile or defines no main(input){_last_line(outcome)}",
        "Define a function main(input) at the top level that returns the node's output.",
    )


def _no_interpreter(node: RunCodeNode, outcome: Outcome, limits: CodeLimits) -> _Explained:
    variable = "AGENTFLOW_RUN_CODE_NODE" if node.language == "javascript" else "AGENTFLOW_RUN_CODE_PYTHON"
    return (
        "code_language_unavailable",
        f"{outcome.detail}",
        f"Install {'Node.js' if node.language == 'javascript' else 'Python'} on the workers where "
        f"any user may run it (or set {variable} to its path), or write the code in another language.",
    )


def _unavailable(node: RunCodeNode, outcome: Outcome, limits: CodeLimits) -> _Explained:
    return (
        "code_sandbox_unavailable",
        f"this worker cannot confine code as it is configured to: {outcome.detail}",
        "Let the worker create namespaces (unprivileged user namespaces, or CAP_SYS_ADMIN), or set "
        "AGENTFLOW_RUN_CODE=on to accept the basic confinement (docs/security.md, Code steps).",
    )


def _setup(node: RunCodeNode, outcome: Outcome, limits: CodeLimits) -> _Explained:
    return (
        "code_sandbox_failed",
        f"the sandbox could not be set up: {outcome.detail}",
        "The step is retried by its retry policy; if it keeps failing, check the worker's "
        "limits (processes, open files) and its log.",
    )


_EXPLAINED = {
    Verdict.TIMEOUT: _timeout,
    Verdict.MEMORY: _memory,
    Verdict.OUTPUT_TOO_LARGE: _output,
    Verdict.INPUT_TOO_LARGE: _input,
    Verdict.FAILED: _failed,
    Verdict.NOT_JSON: _not_json,
    Verdict.NO_MAIN: _no_main,
    Verdict.NO_INTERPRETER: _no_interpreter,
    Verdict.UNAVAILABLE: _unavailable,
    Verdict.SETUP_FAILED: _setup,
}
