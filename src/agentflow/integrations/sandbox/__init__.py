"""The code sandbox: run a ``run_code`` step's Python or JavaScript in a confined subprocess.

``CodeSandbox`` (``code_sandbox``) is what the worker holds; ``watch`` supervises the process;
``cgroups`` gives each execution a control group where the worker may make one;
``launcher`` and ``linux`` run inside the sandbox before the code; ``harness`` is the code's
frame (``main(input)`` in, JSON out). What each platform gets: docs/security.md, "Code steps".
"""

from agentflow.integrations.sandbox.code_sandbox import CodeSandbox
from agentflow.integrations.sandbox.outcome import CodeLimits, Language, Outcome, Verdict

__all__ = ["CodeLimits", "CodeSandbox", "Language", "Outcome", "Verdict"]
