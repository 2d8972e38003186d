"""The ``run_code`` runner against a scripted sandbox: what it asks the sandbox for, and how
every verdict becomes a stable step error code with a fix (the sandbox itself runs real code in
tests/integration/test_code_sandbox.py and tests/fault/test_s2_code_sandbox.py)."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import pytest

from agentflow.core.errors import StepFailure
from agentflow.core.graph.code_nodes import RunCodeNode
from agentflow.core.step_context import StepContext
from agentflow.core.tools import ToolRegistry
from agentflow.integrations.sandbox import CodeLimits, CodeSandbox, Language, Outcome, Verdict
from agentflow.nodes.base import NodeEnv
from agentflow.nodes.registry import runner_for
from agentflow.nodes.run_code import RunCodeRunner
from agentflow.nodes.threads import ToolThreads

RUNNER = RunCodeRunner()
CTX = StepContext(uuid4(), uuid4(), uuid4(), step_seq=2, attempt=1, fencing_token=1, payload={})
LOG = "starting\nTraceback (most recent call last):\n  File \"<code>\", line 2\nKeyError: 'sku'\n"


class ScriptedSandbox(CodeSandbox):
    """Answers every run with ``outcome`` and keeps what it was asked."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__()
        self.outcome = outcome
        self.asked: list[tuple[Language, str, Any, CodeLimits]] = []

    async def run(self, language: Language, code: str, value: Any, limits: CodeLimits) -> Outcome:
        self.asked.append((language, code, value, limits))
        return self.outcome


def node(**fields: Any) -> RunCodeNode:
    fields.setdefault("code", "def main(input):\n    return input")
    return RunCodeNode.model_validate({"id": "calc", "type": "run_code", **fields})


def env(sandbox: CodeSandbox | None, **context: Any) -> NodeEnv:
    return NodeEnv(ToolRegistry(), ToolThreads(), context, code=sandbox)


async def failure_of(outcome: Outcome, **fields: Any) -> StepFailure:
    with pytest.raises(StepFailure) as info:
        await RUNNER.run(node(**fields), CTX, env(ScriptedSandbox(outcome), input={"a": 1}))
    return info.value


async def test_the_rendered_input_and_the_nodes_limits_go_to_the_sandbox() -> None:
    isolation = {"tier": "namespaces", "cgroup": True}
    sandbox = ScriptedSandbox(Outcome(Verdict.OK, value={"doubled": 4}, isolation=isolation))
    spec = node(
        input={"n": "{{ payload.n }}", "fixed": [1]}, timeout="3s", memory_mb=128, max_output_bytes=5000
    )
    step_input, result = await RUNNER.run(spec, CTX, env(sandbox, payload={"n": 2}))
    assert result.output == {"doubled": 4}
    assert step_input == {
        "language": "python",
        "input": {"n": 2, "fixed": [1]},
        "sandbox": "namespaces",
        "cgroup": True,
    }
    [(language, code, value, limits)] = sandbox.asked
    assert (language, code, value) == ("python", spec.code, {"n": 2, "fixed": [1]})
    assert (limits.timeout, limits.memory_bytes, limits.max_output_bytes) == (3.0, 128 << 20, 5000)
    assert limits.max_log_bytes == 1 << 20, "the log may take at least 1 MiB"
    assert runner_for("run_code") is not None and RUNNER.describe(spec) == "python"


async def test_by_default_the_code_gets_the_previous_nodes_output() -> None:
    sandbox = ScriptedSandbox(Outcome(Verdict.OK, value=None))
    await RUNNER.run(node(), CTX, env(sandbox, input=[3, 4]))
    assert sandbox.asked[0][2] == [3, 4]


async def test_a_worker_with_code_steps_off_fails_the_step_without_retrying() -> None:
    with pytest.raises(StepFailure) as info:
        await RUNNER.run(node(), CTX, env(None))
    assert info.value.info.code == "run_code_disabled" and not info.value.retryable
    assert "AGENTFLOW_RUN_CODE=on" in (info.value.info.solution or "")


@pytest.mark.parametrize(
    ("outcome", "fields", "code", "words", "fix"),
    [
        (Outcome(Verdict.TIMEOUT, detail="wall clock"), {"timeout": "2s"}, "code_timeout",
         "did not finish within 2s and was stopped (its time ran out)", "raise the node's 'timeout'"),
        (Outcome(Verdict.TIMEOUT, detail="CPU time"), {}, "code_timeout", "its CPU time ran out", "faster"),
        (Outcome(Verdict.MEMORY, log="MemoryError"), {"memory_mb": 64}, "code_memory_exceeded",
         "more than its 64 MiB of memory", "raise 'memory_mb' (at most 4096)"),
        (Outcome(Verdict.OUTPUT_TOO_LARGE, detail="stdout"), {"max_output_bytes": 100}, "code_output_too_large",
         "over max_output_bytes (100 bytes as JSON)", "raise 'max_output_bytes' (at most 10,485,760)"),
        (Outcome(Verdict.OUTPUT_TOO_LARGE, detail="stderr"), {}, "code_output_too_large",
         "printed more than 1,048,576 bytes", "Print less"),
        (Outcome(Verdict.INPUT_TOO_LARGE, detail="9,000,000 bytes"), {}, "code_input_too_large",
         "take 9,000,000 bytes, over the 8 MiB", "only the part of the data it needs"),
        (Outcome(Verdict.FAILED, detail="exit status 1", log=LOG), {}, "code_failed",
         "the code failed (exit status 1): KeyError: 'sku'", "details.log"),
        (Outcome(Verdict.FAILED, detail="signal SIGSEGV"), {}, "code_failed", "(signal SIGSEGV)", "Fix the code"),
        (Outcome(Verdict.NOT_JSON, detail="exit status 70", log="main returned set, which is not JSON"), {},
         "code_result_invalid", "main did not return a JSON value: main returned set", "finite numbers"),
        (Outcome(Verdict.NOT_JSON, detail="the code ended before main returned"), {}, "code_result_invalid",
         "main did not return a JSON value: the code ended before main returned", "print goes to the log"),
        (Outcome(Verdict.NO_MAIN, log="the code defines no function main(input)"), {}, "code_invalid",
         "defines no main(input): the code defines no function main(input)", "Define a function main"),
        (Outcome(Verdict.NO_INTERPRETER, detail="this worker has no javascript interpreter"),
         {"language": "javascript", "code": "function main(i) { return i; }"}, "code_language_unavailable",
         "no javascript interpreter", "AGENTFLOW_RUN_CODE_NODE"),
        (Outcome(Verdict.NO_INTERPRETER, detail="cannot run /opt/py: Permission denied"), {},
         "code_language_unavailable", "cannot run /opt/py", "AGENTFLOW_RUN_CODE_PYTHON"),
        (Outcome(Verdict.UNAVAILABLE, detail="this worker cannot create namespaces (EPERM)"), {},
         "code_sandbox_unavailable", "cannot confine code as it is configured to", "AGENTFLOW_RUN_CODE=on"),
    ],
)  # fmt: skip
async def test_each_verdict_becomes_a_stable_code_with_a_fix_and_is_not_retried(
    outcome: Outcome, fields: dict[str, Any], code: str, words: str, fix: str
) -> None:
    failed = await failure_of(outcome, **fields)
    assert failed.info.code == code
    assert failed.info.message.startswith("run_code node 'calc': ")
    assert words in failed.info.message, failed.info.message
    assert fix in (failed.info.solution or ""), failed.info.solution
    assert not failed.retryable
    assert failed.info.details["node"] == "calc"


async def test_the_error_carries_the_end_of_the_log_the_reason_and_the_tier() -> None:
    long_log = "x" * 5000 + "\nValueError: late"
    outcome = Outcome(Verdict.FAILED, detail="exit status 1", log=long_log, isolation={"tier": "basic"})
    failed = await failure_of(outcome)
    details = failed.info.details
    assert details["log"] == long_log[-2000:] and details["log"].endswith("ValueError: late")
    assert (details["reason"], details["sandbox"], details["language"]) == (
        "exit status 1",
        "basic",
        "python",
    )


async def test_a_sandbox_that_could_not_be_set_up_is_retried() -> None:
    failed = await failure_of(Outcome(Verdict.SETUP_FAILED, detail="OSError: [Errno 11] fork"))
    assert failed.info.code == "code_sandbox_failed" and failed.retryable
    assert "could not be set up: OSError" in failed.info.message
