"""What a graph run's frontier is made of (``core.graph.frontier``): activations, timers,
loops, and the frontier itself."""

from __future__ import annotations

from dataclasses import field
from datetime import datetime
from typing import Any

from agentflow.core.frozen import frozen

FIRED = "fired"
SKIPPED = "skipped"


@frozen
class Activation:
    """One execution of one node.

    Attributes:
        node: the node's id.
        via: the predecessors whose links made it ready (one; for a join, every one that fired).
        supplied: its ``input`` was given when the run started there (``start_from``).
        input: that input.
        seq: its step number, once a worker started it beside others (see ``number``);
            None: it takes the next free number when it starts.
        failures: its failed attempts so far, when it retries on its own (beside others).
        asked: the step that asked a person, when it runs again to read the answer (a
            ``user_input`` node; see ``park``).
    """

    node: str
    via: tuple[str, ...] = ()
    supplied: bool = False
    input: Any = None
    seq: int | None = None
    failures: int = 0
    asked: int | None = None


@frozen
class Timer:
    """A port that fires later (a ``wait`` node's).

    Attributes:
        source / port: whose links fire when it is due.
        secs: seconds from the checkpoint that writes it (it then becomes ``at``).
        at: when it is due, database time (ISO 8601).
        on_event: also due when something new arrives in the run's inbox.
        retry: an activation that failed beside others and runs again when this is due
            (then ``source`` is its node and ``port`` is empty).
    """

    source: str
    port: str
    secs: float | None = None
    at: str | None = None
    on_event: bool = False
    retry: Activation | None = None

    def due_by(self, now: datetime | None) -> bool:
        """Whether it is due at database time ``now`` (never when ``at`` is not known yet)."""
        return now is not None and self.at is not None and datetime.fromisoformat(self.at) <= now


@frozen
class Loop:
    """A ``for_each`` whose items run as child runs.

    Attributes:
        node: the loop's node.
        seq: the parent's step that started it (its children carry it as ``parent_step``).
        total: items in the loop.
        released: items let run so far (at most ``concurrency`` unfinished at once).
        via: the activation's ``via`` (to run the loop again when a failed run is retried).
        ended: items that had ended when the run last counted them.
        quiet: counts in a row that found no item newly ended (the run polls less often).
    """

    node: str
    seq: int
    total: int
    released: int
    via: tuple[str, ...] = ()
    ended: int = 0
    quiet: int = 0


@frozen
class Frontier:
    """What a graph run has left to do.

    Attributes:
        ready: activations to execute, in order.
        timers: ports that fire later.
        arrivals: for each node with several incoming links that some but not all have
            reached: ``{"<source>/<port>": "fired" | "skipped"}``, and ``"done"`` once a join
            that fires early (``first``) has fired.
        skipped: nodes skipped because every link into them was skipped.
        last: the node whose output a run that ends without a ``finish`` completes with.
        loops: loops whose items are running.
    """

    ready: tuple[Activation, ...] = ()
    timers: tuple[Timer, ...] = ()
    arrivals: dict[str, dict[str, str]] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()
    last: str | None = None
    loops: tuple[Loop, ...] = ()

    @property
    def empty(self) -> bool:
        """Nothing is ready, asleep or looping: the run is over."""
        return not self.ready and not self.timers and not self.loops
