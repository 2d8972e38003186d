"""How a ``for_each`` moves its run: the items start as child runs, the parent waits, counts
them when it wakes, lets more run, and joins them (see ``agentflow.core.graph.looping``).

Pure decisions: the worker loads the counts (``LoopProgress``) and the checkpoint applies
the effects (children inserted, items released, the rest canceled) in the same statement as
the parent's step.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ErrorInfo
from agentflow.core.frozen import frozen
from agentflow.core.graph import frontier
from agentflow.core.graph.frontier import Activation, Loop
from agentflow.core.graph.looping import DONE, ITERATION, ForEachNode, LoopProgress, loop_results
from agentflow.core.node_specs import ERROR_PORT
from agentflow.core.planner import moved, variables
from agentflow.core.statuses import RunStatus
from agentflow.core.step_results import Transition


@frozen
class LoopStep:
    """What a parent's step about its loops records: the transition, and the step's node
    (the loop's, when it ended; None for a step that only counted and released) and output."""

    transition: Transition
    node_id: str | None
    output: Any


def on_loop_start(
    config: StructuredConfig,
    state: dict[str, Any],
    node: ForEachNode,
    items: list[Any],
    seq: int,
    done: Activation | None = None,
) -> Transition:
    """The run after ``node`` (activation ``done``, by default the first ready) rendered
    ``items`` in step ``seq``: each item becomes a child run starting at the body's first
    node; the first ``concurrency`` may run at once. An empty list fires ``done`` with an
    empty list."""
    graph = config.graph
    before = frontier.load(state, graph)
    done = done or (before.ready[0] if before.ready else Activation(node.id))
    if not items:
        after = frontier.finish_activation(graph, before, done, DONE)
        return moved(config, state, after, "completed", [])
    entry = graph.outgoing(node.id, ITERATION)[0].target
    kept = {"vars": variables(state)} if "vars" in state else {}
    children = tuple(
        {
            "item_index": index,
            "state": frontier.dump(frontier.start_at(graph, entry, item), kept, graph),
            "released": index < node.concurrency,
        }
        for index, item in enumerate(items)
    )
    released = min(node.concurrency, len(items))
    after = frontier.start_loop(before, done, seq, len(items), released)
    return moved(
        config, state, after, "completed", {"items": len(items), "running": released}, children=children
    )


def on_child_start(
    config: StructuredConfig,
    state: dict[str, Any],
    child_state: dict[str, Any],
    seq: int,
    done: Activation,
    output: Any,
    child_run: dict[str, Any] | None = None,
) -> Transition:
    """The run after activation ``done`` (a node that runs as one child run, such as an
    ``agent``) started it in step ``seq``: the child starts with ``child_state`` (as a run of
    its own workflow, ``child_run``, for a ``run_workflow``), and the node waits for it as a
    loop of one item."""
    before = frontier.load(state, config.graph)
    children = ({"item_index": 0, "state": child_state, "released": True, **(child_run or {})},)
    after = frontier.start_loop(before, done, seq, 1, 1)
    return moved(config, state, after, "completed", output, children=children)


def detached_child(
    transition: Transition, child_state: dict[str, Any], child_run: dict[str, Any]
) -> Transition:
    """``transition`` (the node moved on) that also starts a child run nobody waits for: not an
    item of the run, so neither counted, woken for, nor canceled with it."""
    child = {"state": child_state, "released": True, "detached": True, **child_run}
    return replace(transition, children=(child,))


def on_loop_wake(
    config: StructuredConfig, state: dict[str, Any], progress: dict[int, LoopProgress]
) -> LoopStep:
    """The parent woke with nothing ready but loops running: for each loop, by what the
    database counts, fail it (an item failed and ``on_item_error`` is ``fail``), join it (every
    item ended), or let more items run. One loop ends per step; the others are looked at in
    the next."""
    graph = config.graph
    current = frontier.load(state, graph)
    release: list[tuple[int, int]] = []
    for loop in current.loops:
        node = config.node(loop.node)
        seen = progress.get(loop.seq, LoopProgress())
        if not isinstance(node, ForEachNode):
            if seen.ended and seen.items is not None:
                return _child_ended(config, state, current, loop, seen.items[0], tuple(release))
            current = frontier.count_items(current, loop, seen.ended)
            continue
        if seen.failed and node.on_item_error == "fail":
            return _failed(config, state, current, loop, node, seen, tuple(release))
        if seen.ended >= loop.total and seen.items is not None:
            results = loop_results(node.on_item_error, seen.items)
            after = frontier.end_loop(graph, current, loop, DONE)
            return LoopStep(
                moved(config, state, after, "completed", results, release=tuple(release)), node.id, results
            )
        more = max(0, min(node.concurrency - (loop.released - seen.ended), loop.total - loop.released))
        current = frontier.count_items(current, loop, seen.ended, more)
        if more > 0:
            release.append((loop.seq, loop.released + more))
    counted = {"loops": [{"node": o.node, "released": o.released, "total": o.total} for o in current.loops]}
    return LoopStep(moved(config, state, current, "completed", None, release=tuple(release)), None, counted)


def _child_ended(
    config: StructuredConfig,
    state: dict[str, Any],
    current: frontier.Frontier,
    loop: Loop,
    end: dict[str, Any],
    release: tuple[tuple[int, int], ...],
) -> LoopStep:
    """A node's only child run ended: fire ``result`` with its output, or fail the node with
    its error (down ``error`` when an edge leaves it, else the run fails)."""
    node = config.node(loop.node)
    if end["status"] == "completed":
        after = frontier.end_loop(config.graph, current, loop, "result")
        output = end["output"]
        return LoopStep(moved(config, state, after, "completed", output, release=release), node.id, output)
    child = end.get("error") or {}
    code = str(child.get("code") or "child_failed")
    error = ErrorInfo(
        code,
        f"{node.type} node {node.id!r}: {child.get('message') or 'its run ' + str(end['status'])}",
        {"node": node.id, "status": end["status"], **(child.get("details") or {})},
        child.get("solution"),
    )
    if config.graph.outgoing(node.id, ERROR_PORT):
        after = frontier.end_loop(config.graph, current, loop, ERROR_PORT)
        return LoopStep(
            moved(config, state, after, "failed", None, handled=error, release=release), node.id, None
        )
    left = frontier.dump(current, state, config.graph)
    failed = Transition(RunStatus.FAILED, left, "failed", reason=error.code, error=error, release=release)
    return LoopStep(failed, node.id, None)


def _failed(
    config: StructuredConfig,
    state: dict[str, Any],
    current: frontier.Frontier,
    loop: Loop,
    node: ForEachNode,
    seen: LoopProgress,
    release: tuple[tuple[int, int], ...],
) -> LoopStep:
    first = seen.first_error or {}
    why = f"{first.get('code')}: {first.get('message')}"
    error = ErrorInfo(
        "loop_item_failed",
        f"item {seen.first_failed} of for_each {node.id!r} failed: {why}",
        {"node": node.id, "index": seen.first_failed, "error": first},
        "Fix what the item needs, or set on_item_error to skip or collect.",
    )
    cancel = (loop.seq,)
    if config.graph.outgoing(node.id, ERROR_PORT):
        after = frontier.end_loop(config.graph, current, loop, ERROR_PORT)
        handled = moved(
            config, state, after, "failed", None, handled=error, release=release, cancel_loops=cancel
        )
        return LoopStep(handled, node.id, None)
    # The loop stays in the frontier with everything else: retrying the run runs the items
    # that did not complete again (store.runs.retry) and keeps those that did.
    left = frontier.dump(current, state, config.graph)
    failed = Transition(
        RunStatus.FAILED, left, "failed", reason=error.code, error=error, release=release, cancel_loops=cancel
    )
    return LoopStep(failed, node.id, None)
