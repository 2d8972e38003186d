"""Workflow templates: ``{{ ... }}`` in config values, rendered in a bounded Jinja sandbox.

``render`` is the entry point; ``deferring`` and ``RenderDeferred`` let a caller on an event
loop hand a slow render to a thread (``agentflow.nodes.rendering`` does).
"""

from agentflow.core.templating.meter import RenderDeferred, deferring
from agentflow.core.templating.render import (
    copied,
    has_templates,
    render,
    template_problem,
    template_problems,
)

__all__ = [
    "RenderDeferred",
    "copied",
    "deferring",
    "has_templates",
    "render",
    "template_problem",
    "template_problems",
]
