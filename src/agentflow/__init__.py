"""agentflow: a durable agentic workflow engine on PostgreSQL."""

from agentflow.core.errors import StepFailure
from agentflow.core.step_context import StepContext
from agentflow.core.tools import tool

__version__ = "0.1.0.dev0"

__all__ = ["Engine", "StepContext", "StepFailure", "__version__", "tool"]


def __getattr__(name: str) -> object:
    # The engine pulls in the database driver; import it only when asked for.
    if name == "Engine":
        from agentflow.engine import Engine

        return Engine
    raise AttributeError(name)
