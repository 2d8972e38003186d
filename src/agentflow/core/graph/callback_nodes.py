"""The ``wait_callback`` node: the run waits until an outside system calls back (seed 002 lists
``wait_callback``; Temporal's signals, n8n's resume URL).

The node's first step makes a callback: a request row (kind ``callback``) bound to the run and
that step, with a single-use URL whose token only the row's hash can check; the run waits
durably, holding no worker. The first ``POST`` to the URL with a valid token answers the
request; its JSON body reaches the run through its inbox and becomes the node's output on
``result``. A second call gets 409, naming when the first came. When nobody calls within
``wait``, ``timeout_action`` applies: ``fail`` the node (``callback_timed_out``), ``continue``
down ``timeout`` (output null), or take ``default_response`` as the body.

``notify`` (a URL, templated) tells the outside system where to call: a webhook through the
notification outbox, written with the step (exactly once) and delivered at least once, whose
``data`` carries ``{callback_url, request_id, run_id, node, expires_at, data}``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar, Literal

from pydantic import Field, JsonValue, field_validator, model_validator

from agentflow.core.durations import parse_duration
from agentflow.core.graph.action_nodes import rendered_url_problem
from agentflow.core.node_specs import ERROR_PORT, Duration, NodeSpec, register_node_spec
from agentflow.core.templating import has_templates

TIMEOUT = "timeout"
DEFAULT_WAIT = timedelta(days=1)
MAX_WAIT = timedelta(days=365)


class WaitCallbackNode(NodeSpec):
    """Wait until an outside system POSTs to this step's callback URL (single use, with a
    secret token); its JSON body is the output on ``result``. ``notify`` (a templated URL)
    receives the callback URL as a webhook, exactly once. Past ``wait``: ``timeout_action``
    ``fail`` (default), ``continue`` down ``timeout``, or ``default_response``."""

    title: ClassVar[str] = "Wait for a callback"
    literal_fields: ClassVar[frozenset[str]] = frozenset({"timeout_action", "default_response"})
    type: Literal["wait_callback"] = "wait_callback"
    wait: Duration = Field(default=DEFAULT_WAIT, description="How long to wait for the call (1s to 365d).")
    timeout_action: Literal["fail", "continue", "default_response"] = Field(
        default="fail", description="fail the node, go on down 'timeout', or take default_response."
    )
    default_response: JsonValue = Field(default=None, description="The body taken at the timeout.")
    notify: str | None = Field(
        default=None, max_length=2_000, description="An http(s) URL told the callback URL (a template)."
    )
    data: JsonValue = Field(default=None, description="Sent to 'notify' with the URL (templates).")

    @field_validator("wait", mode="before")
    @classmethod
    def _wait(cls, value: Any) -> timedelta:
        found = parse_duration(value)
        if not timedelta(seconds=1) <= found <= MAX_WAIT:
            raise ValueError("wait must be between 1s and 365d")
        return found

    @model_validator(mode="after")
    def _consistent(self) -> WaitCallbackNode:
        if (self.timeout_action == "default_response") != (self.default_response is not None):
            raise ValueError("'default_response' goes with timeout_action 'default_response', which needs it")
        if self.data is not None and self.notify is None:
            raise ValueError("'data' is sent to 'notify', which is missing")
        if self.notify is not None and not has_templates(self.notify):
            problem = rendered_url_problem(self.notify.strip())
            if problem is not None:
                raise ValueError(f"'notify': {problem}")
        return self

    def output_ports(self) -> tuple[str, ...]:
        """``result``; ``timeout`` when the timeout continues; ``error``."""
        if self.timeout_action == "continue":
            return ("result", TIMEOUT, ERROR_PORT)
        return ("result", ERROR_PORT)


register_node_spec(WaitCallbackNode)
