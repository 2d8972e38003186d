"""The ``for_each`` node: run a sub-graph, the loop's body, once per item of a list.

The body is what the ``iteration`` port leads to; each item runs as a child run of the
parent's version, started at the body's first node with the item as its ``{{ input }}``,
and ends where the body ends. At most ``concurrency`` items run at once, on any worker. When
every item has ended the loop fires ``done`` with the items' results in list order; a failed
item follows ``on_item_error``: ``fail`` the loop (its ``error`` port, else the run), ``skip``
it, or ``collect`` its error in its place.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from agentflow.core.frozen import frozen
from agentflow.core.node_specs import ANY, NodeSpec, register_node_spec

ITERATION = "iteration"
DONE = "done"
MAX_ITEMS = 100_000
POLL_SECONDS = 1.0
"""How soon a waiting loop counts its items again even when none woke it: an item that ends
while its run is busy (counting, or running another branch) finds no waiting run to wake.
Every way an item ends wakes a waiting run (migration 0033), and one that ends while the run is
busy makes its next wait due at once (0036), so this is a backstop."""
MAX_POLL_SECONDS = 300.0
"""The longest a quiet loop waits between counts: each count that finds nothing new doubles
its wait up to this, so a child that runs for days costs a few hundred steps, not one a
second."""


def loop_poll(base: float, quiet: int) -> float:
    """How soon a loop counts again after ``quiet`` counts in a row found nothing new."""
    return min(MAX_POLL_SECONDS, base * float(2 ** min(quiet, 20)))


class ForEachNode(NodeSpec):
    """Run the loop body (the ``iteration`` port) once per item of ``items``, ``concurrency``
    at a time; ``done`` carries the results in order."""

    title: ClassVar[str] = "For each"
    port_names: ClassVar[tuple[str, ...]] = (ITERATION, DONE, "error")
    body_ports: ClassVar[tuple[str, ...]] = (ITERATION,)
    type: Literal["for_each"] = "for_each"
    items: str = Field(default="{{ input }}", max_length=10_000, description="A template giving the list.")
    concurrency: int = Field(default=10, ge=1, le=100, description="Items running at once.")
    max_items: int = Field(default=1000, ge=1, le=MAX_ITEMS, description="A longer list fails the loop.")
    on_item_error: Literal["fail", "skip", "collect"] = Field(
        default="fail",
        description="A failed item fails the loop, is left out, or leaves its error in its place.",
    )

    def declared_schema(self, port: str) -> dict[str, Any]:
        """``done``: the list of results; ``iteration``: one item (not known before it runs)."""
        return {"type": "array"} if port == DONE else ANY


def loop_results(on_item_error: str, items: list[dict[str, Any]]) -> list[Any]:
    """The loop's output from its items' ends (each ``{status, output, error}``, in order)."""
    if on_item_error == "collect":
        return [i["output"] if i["status"] == "completed" else {"error": i["error"]} for i in items]
    return [i["output"] for i in items if i["status"] == "completed"]


register_node_spec(ForEachNode)


@frozen
class LoopProgress:
    """How far a loop's items are, as the database counts them when the parent wakes.

    Attributes:
        completed / failed: items ended so far (canceled counts as failed).
        first_failed: the lowest index of a failed item, with its ``error``.
        items: every item's end, in order (``{status, output, error}``), once all have ended.
    """

    completed: int = 0
    failed: int = 0
    first_failed: int | None = None
    first_error: dict[str, Any] | None = None
    items: list[dict[str, Any]] | None = None

    @property
    def ended(self) -> int:
        """Items that have ended, either way."""
        return self.completed + self.failed
