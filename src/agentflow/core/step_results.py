"""What a node runner returns (``NodeResult``) and how a checkpoint moves the run
(``Transition``): the values ``agentflow.core.planner`` turns one into the other with.
"""

from __future__ import annotations

from dataclasses import field
from datetime import datetime, timedelta
from typing import Any

from agentflow.core.errors import ErrorInfo
from agentflow.core.frozen import frozen
from agentflow.core.statuses import RunStatus


@frozen
class NodeResult:
    """What a node runner returns.

    Attributes:
        output: the step's JSON output.
        wake_after: sleep this long (durably) before the next node.
        wake_at: or sleep until this time (never earlier than now).
        finish: complete the run with ``output`` now.
        wake_on_event: end the sleep early when something arrives in the run's inbox.
        passes_inbox: the step did not use ``inbox``: its checkpoint leaves the rows for the
            next step instead of consuming them (a wait hands on what arrived).
        port: the output port whose edges fire (a condition's chosen branch).
        loop_items: a ``for_each``'s items, each to run as a child run.
        child_state: the node runs as one child run that starts with this state (an
            ``agent`` node); its end moves the node on.
        child_run: for a child of another workflow (``run_workflow``): its ``id``,
            ``workflow_id``, ``workflow_version``, ``input`` and ``caller_node``.
        child_waits: False: the child runs on its own and the node moves on at once.
        request: a request to a person that the step's checkpoint writes (``user_input``).
        park_secs: the node waits for its answer: it runs again when something arrives in
            the inbox, or after this many seconds at most.
        consumed: the inbox rows the step used (None: all it saw, unless ``passes_inbox``).
        notifications: notification documents its checkpoint writes to the outbox (once).
    """

    output: Any = None
    wake_after: timedelta | None = None
    wake_at: datetime | None = None
    finish: bool = False
    wake_on_event: bool = False
    passes_inbox: bool = False
    port: str = "result"
    loop_items: list[Any] | None = None
    child_state: dict[str, Any] | None = None
    child_run: dict[str, Any] | None = None
    child_waits: bool = True
    request: dict[str, Any] | None = None
    park_secs: float | None = None
    consumed: tuple[int, ...] | None = None
    notifications: tuple[dict[str, Any], ...] = ()


@frozen
class Transition:
    """How a checkpoint moves the run.

    Attributes:
        status: the run's next status.
        state: the run's next state document.
        step_status: ``completed`` (the step advances) or ``failed`` (an attempt failed).
        wake_after / wake_at: for ``waiting``, when the run is due again.
        reason: why the run waits, fails or is suspended.
        output: the run's output when it completes.
        error: the run's error when it fails.
        handled: the step failed for good but the run goes on down the node's ``error`` port,
            with ``step_output`` (the error) as the failed step's output.
        children: loop items to insert as child runs (``item_index``, ``state``, ``released``).
        release: per loop (its step), let its items below this index run.
        cancel_loops: loops (their steps) whose unfinished items are canceled.
    """

    status: RunStatus
    state: dict[str, Any]
    step_status: str
    wake_after: timedelta | None = None
    wake_at: datetime | None = None
    reason: str | None = None
    output: Any = None
    error: ErrorInfo | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    handled: bool = False
    step_output: Any = None
    children: tuple[dict[str, Any], ...] = ()
    release: tuple[tuple[int, int], ...] = ()
    cancel_loops: tuple[int, ...] = ()

    @property
    def advances(self) -> bool:
        """True when the run moves to its next step: the step completed, or its failure was
        handled down an ``error`` port."""
        return self.step_status == "completed" or self.handled
