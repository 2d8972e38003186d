"""A graph run's frontier: which activations are ready, which sleep, and how the end of one
moves the run.

An activation is one execution of one node. The run's ``state`` holds only the frontier
(outputs live in ``run_steps``), so it stays bounded by the graph's size however long the
run. When an activation ends, the links from the port it fired *fire* and the links from its
other ports are *skipped*; a node becomes ready when a link into it fires (a node that joins:
when every link into it has fired or been skipped, and the node's rule says so). A node all
of whose incoming links were skipped is skipped too, and so are its own links, so a join
downstream of a branch not taken never waits for it.

A ``wait`` fires its port later: the port goes into a timer, which the checkpoint stamps
with the database's clock (``at``); the run releases it when the database's time has come.

The common linear case is stored as before graphs: ``{"node": <id>}`` (or ``{"node": null}``
with nothing left), so linear runs keep their state and their cost.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from agentflow.core.graph.activations import FIRED as FIRED
from agentflow.core.graph.activations import SKIPPED as SKIPPED
from agentflow.core.graph.activations import Activation as Activation
from agentflow.core.graph.activations import Frontier as Frontier
from agentflow.core.graph.activations import Loop as Loop
from agentflow.core.graph.activations import Timer as Timer
from agentflow.core.graph.link_moves import Moves
from agentflow.core.graph.model import Graph


def start(graph: Graph, entry: str) -> Frontier:
    """The frontier of a new run: its first node ready."""
    return Frontier(ready=(Activation(entry),))


def start_at(graph: Graph, node: str, given: Any) -> Frontier:
    """The frontier of a run started at ``node`` with ``given`` as its input (seed 001's
    ``start_from_node``). What cannot run before it (nodes it cannot reach) never will, so
    their links into nodes it can reach count as skipped: a join there waits only for the
    branches that can still come."""
    reach = set(graph.reachable(node))
    moved = Moves.of(graph, Frontier(ready=(Activation(node, (), True, given),)))
    for source in graph.nodes:
        if source in reach:
            continue
        for link in graph.outgoing(source):
            if link.target in reach and link.target != node:
                moved.resolve(link, fired=False)
    return moved.frontier(last=None)


def load(state: dict[str, Any], graph: Graph) -> Frontier:
    """The frontier a run's state document holds (either form)."""
    if "ready" not in state and "timers" not in state and "loops" not in state:
        node = state.get("node")
        last = state.get("after")
        if not isinstance(node, str):
            return Frontier(last=last if isinstance(last, str) else None)
        via = tuple(link.source for link in graph.incoming(node))
        return Frontier(ready=(Activation(node, via[:1]),))
    return Frontier(
        ready=tuple(_activation(a) for a in state.get("ready", ())),
        timers=tuple(_timer(t) for t in state.get("timers", ())),
        arrivals={node: dict(seen) for node, seen in state.get("arrivals", {}).items()},
        skipped=tuple(state.get("skipped", ())),
        last=state.get("last"),
        loops=tuple(_loop(o) for o in state.get("loops", ())),
    )


def dump(frontier: Frontier, state: dict[str, Any], graph: Graph) -> dict[str, Any]:
    """``state`` with ``frontier`` in it (the compact linear form when it fits)."""
    kept = {key: value for key, value in state.items() if key == "vars"}
    compact = len(frontier.ready) <= 1 and not (
        frontier.timers or frontier.arrivals or frontier.skipped or frontier.loops
    )
    if compact and frontier.ready:
        only = frontier.ready[0]
        incoming = graph.incoming(only.node)
        compact = (
            not only.supplied
            and only.seq is None
            and not only.failures
            and only.asked is None
            and len(incoming) <= 1
            and only.via == tuple(link.source for link in incoming)
        )
    if compact:
        return {"node": frontier.ready[0].node if frontier.ready else None, **kept}
    doc: dict[str, Any] = {"ready": [_activation_json(a) for a in frontier.ready]}
    if frontier.timers:
        doc["timers"] = [_timer_json(t) for t in frontier.timers]
    if frontier.arrivals:
        doc["arrivals"] = frontier.arrivals
    if frontier.skipped:
        doc["skipped"] = list(frontier.skipped)
    if frontier.last is not None:
        doc["last"] = frontier.last
    if frontier.loops:
        doc["loops"] = [_loop_json(o) for o in frontier.loops]
    return {**doc, **kept}


def _loop(doc: dict[str, Any]) -> Loop:
    via = tuple(doc.get("via", ()))
    return Loop(
        doc["node"], doc["seq"], doc["total"], doc["released"], via, doc.get("ended", 0), doc.get("quiet", 0)
    )


def _loop_json(loop: Loop) -> dict[str, Any]:
    doc: dict[str, Any] = {"node": loop.node, "seq": loop.seq, "total": loop.total}
    doc.update(released=loop.released, via=list(loop.via))
    if loop.ended:
        doc["ended"] = loop.ended
    if loop.quiet:
        doc["quiet"] = loop.quiet
    return doc


def _activation(doc: dict[str, Any]) -> Activation:
    return Activation(
        doc["node"],
        tuple(doc.get("via", ())),
        "input" in doc,
        doc.get("input"),
        doc.get("seq"),
        doc.get("failures", 0),
        doc.get("asked"),
    )


def _activation_json(activation: Activation) -> dict[str, Any]:
    doc: dict[str, Any] = {"node": activation.node, "via": list(activation.via)}
    if activation.supplied:
        doc["input"] = activation.input
    if activation.seq is not None:
        doc["seq"] = activation.seq
    if activation.failures:
        doc["failures"] = activation.failures
    if activation.asked is not None:
        doc["asked"] = activation.asked
    return doc


def _timer(doc: dict[str, Any]) -> Timer:
    retry = _activation(doc["retry"]) if "retry" in doc else None
    return Timer(doc["from"], doc["port"], doc.get("secs"), doc.get("at"), bool(doc.get("event")), retry)


def _timer_json(timer: Timer) -> dict[str, Any]:
    doc: dict[str, Any] = {"from": timer.source, "port": timer.port}
    if timer.at is not None:
        doc["at"] = timer.at
    elif timer.secs is not None:
        doc["secs"] = timer.secs
    if timer.on_event:
        doc["event"] = True
    if timer.retry is not None:
        doc["retry"] = _activation_json(timer.retry)
    return doc


def finish_activation(
    graph: Graph,
    frontier: Frontier,
    done: Activation,
    port: str | None,
    *,
    later: Timer | None = None,
) -> Frontier:
    """The frontier after ``done`` ended and fired ``port`` (None: it fired nothing).

    With ``later``, the port fires when that timer is due instead of now (a wait); its
    other ports are skipped now.
    """
    ready = list(frontier.ready)
    ready.remove(done)
    moved = Moves.of(graph, frontier, ready=ready)
    moved.leave(done.node, port, fire=later is None)
    if later is not None:
        moved.timers.append(later)
    return moved.frontier(last=done.node)


def start_loop(frontier: Frontier, done: Activation, seq: int, total: int, released: int) -> Frontier:
    """The frontier once ``done`` (a ``for_each``) started its items as child runs: it leaves
    the ready list and waits as a loop; none of its ports fire yet."""
    ready = list(frontier.ready)
    ready.remove(done)
    loop = Loop(done.node, seq, total, released, done.via)
    return replace(frontier, ready=tuple(ready), loops=(*frontier.loops, loop))


def count_items(frontier: Frontier, loop: Loop, ended: int, more: int = 0) -> Frontier:
    """The frontier after the run counted ``ended`` of ``loop``'s items ended and let ``more``
    run: a count that found nothing new and let nothing run makes the loop quieter."""
    news = ended != loop.ended or more > 0
    counted = replace(loop, released=loop.released + more, ended=ended, quiet=0 if news else loop.quiet + 1)
    return replace(frontier, loops=tuple(counted if o == loop else o for o in frontier.loops))


def end_loop(graph: Graph, frontier: Frontier, loop: Loop, port: str) -> Frontier:
    """The frontier after ``loop`` ended by ``port`` (``done``, or ``error`` when it failed)."""
    moved = Moves.of(graph, replace(frontier, loops=tuple(o for o in frontier.loops if o != loop)))
    moved.leave(loop.node, port, fire=True)
    return moved.frontier(last=loop.node)


def release(graph: Graph, frontier: Frontier, now: datetime | None, *, inbox_news: bool = False) -> Frontier:
    """The frontier with every timer due at database time ``now`` fired (and, with
    ``inbox_news``, every timer that also ends on an inbox delivery)."""
    due = [t for t in frontier.timers if t.due_by(now) or (inbox_news and t.on_event)]
    if not due:
        return frontier
    moved = Moves.of(graph, frontier, timers=[t for t in frontier.timers if t not in due])
    # In the order they fell due: a later look finds the same ones first and more after,
    # so what they make ready takes the same step numbers whenever a worker looks.
    last = frontier.last
    for timer in sorted(due, key=lambda t: t.at or ""):
        if timer.retry is not None:
            moved.ready.append(timer.retry)
            continue
        last = timer.source
        for link in graph.outgoing(timer.source, timer.port):
            moved.resolve(link, fired=True)
    return moved.frontier(last=last)


def retry_later(frontier: Frontier, failed: Activation, failures: int, secs: float) -> Frontier:
    """The frontier after ``failed`` failed its ``failures``-th attempt while other
    activations ran: it sleeps ``secs`` (a timer stamped by the checkpoint) and runs again,
    under the same step number, while the others go on."""
    ready = list(frontier.ready)
    ready.remove(failed)
    again = replace(failed, failures=failures)
    timer = Timer(failed.node, "", secs=secs, retry=again)
    return replace(frontier, ready=tuple(ready), timers=(*frontier.timers, timer))


def park(frontier: Frontier, waiting: Activation, asked: int, secs: float) -> Frontier:
    """The frontier after ``waiting`` asked a person in step ``asked``: it leaves the ready
    list and runs again (under a new step number, knowing ``asked``) when something arrives
    in the run's inbox (the answer, or the request's timeout), or after ``secs`` at most."""
    ready = list(frontier.ready)
    ready.remove(waiting)
    again = replace(waiting, seq=None, failures=0, asked=asked)
    timer = Timer(waiting.node, "", secs=secs, on_event=True, retry=again)
    return replace(frontier, ready=tuple(ready), timers=(*frontier.timers, timer))


def mark_started(frontier: Frontier, started: dict[int, int]) -> Frontier:
    """``frontier`` with the ready activations at the positions in ``started`` given those
    step numbers (a worker runs them beside others: their numbers must not change)."""
    ready = tuple(
        replace(a, seq=started[i]) if i in started and a.seq is None else a
        for i, a in enumerate(frontier.ready)
    )
    return replace(frontier, ready=ready)


def earliest(frontier: Frontier) -> tuple[float | None, str | None]:
    """When the first timer is due: seconds from now for one not stamped yet, and the
    earliest stamped time (the checkpoint takes the sooner of the two)."""
    fresh = [t.secs for t in frontier.timers if t.at is None and t.secs is not None]
    stamped = sorted(t.at for t in frontier.timers if t.at is not None)
    return (min(fresh) if fresh else None), (stamped[0] if stamped else None)
