"""How the end of an activation moves a graph run's frontier: links fire or are skipped,
joins gather, skipped branches skip what only they lead to (``core.graph.frontier``)."""

from __future__ import annotations

from dataclasses import dataclass

from agentflow.core.graph.activations import FIRED, SKIPPED, Activation, Frontier, Loop, Timer
from agentflow.core.graph.model import Graph, Link


@dataclass
class Moves:
    """The frontier being changed by one activation's end (mutable while it is worked out)."""

    graph: Graph
    ready: list[Activation]
    timers: list[Timer]
    arrivals: dict[str, dict[str, str]]
    skipped: list[str]
    loops: tuple[Loop, ...] = ()

    @classmethod
    def of(
        cls,
        graph: Graph,
        frontier: Frontier,
        *,
        ready: list[Activation] | None = None,
        timers: list[Timer] | None = None,
    ) -> Moves:
        """A working copy of ``frontier`` (with ``ready`` or ``timers`` replaced)."""
        return cls(
            graph,
            list(frontier.ready) if ready is None else ready,
            list(frontier.timers) if timers is None else timers,
            {node: dict(seen) for node, seen in frontier.arrivals.items()},
            list(frontier.skipped),
            frontier.loops,
        )

    def frontier(self, last: str | None) -> Frontier:
        """The frontier as moved, ``last`` the node a run without a ``finish`` ends with."""
        return Frontier(
            tuple(self.ready), tuple(self.timers), self.arrivals, tuple(self.skipped), last, self.loops
        )

    def leave(self, node: str, port: str | None, *, fire: bool) -> None:
        """``node`` ended by ``port``: its links fire (if ``fire``; a wait fires them later)
        and those of its other ports are skipped; a loop's body links are neither."""
        body = self.graph.nodes[node].body_ports
        for link in self.graph.outgoing(node):
            if link.port == port:
                if fire:
                    self.resolve(link, fired=True)
            elif link.port not in body:
                self.resolve(link, fired=False)

    def resolve(self, link: Link, *, fired: bool) -> None:
        """``link`` fired (or was skipped): its target may become ready, or skipped."""
        target = self.graph.nodes[link.target]
        incoming = self.graph.incoming(link.target)
        if len(incoming) == 1:
            if fired:
                self.ready.append(Activation(link.target, (link.source,)))
            else:
                self.skip(link.target)
            return
        seen = self.arrivals.setdefault(link.target, {})
        seen[f"{link.source}/{link.port}"] = FIRED if fired else SKIPPED
        if fired and not target.joins:
            self.ready.append(Activation(link.target, (link.source,)))
        fired_from = [key.split("/", 1)[0] for key, how in seen.items() if how == FIRED]
        resolved = len([key for key in seen if key != "done"]) >= len(incoming)
        if (
            target.joins
            and "done" not in seen
            and fired_from
            and target.join_ready(len(fired_from), resolved)
        ):
            self.ready.append(Activation(link.target, tuple(fired_from)))
            seen["done"] = FIRED
        if resolved:
            del self.arrivals[link.target]
            if not fired_from:
                self.skip(link.target)

    def skip(self, node: str) -> None:
        """``node`` is skipped: every link out of it (but a loop's body) is skipped too."""
        self.skipped.append(node)
        body = self.graph.nodes[node].body_ports
        for link in self.graph.outgoing(node):
            if link.port not in body:
                self.resolve(link, fired=False)
