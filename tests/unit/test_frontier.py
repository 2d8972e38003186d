"""The frontier of a graph run: what becomes ready, what is skipped, what waits."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.graph import frontier
from agentflow.core.graph.frontier import Activation, Frontier, Timer
from agentflow.core.graph.model import Graph
from agentflow.core.graph.summaries import node_summaries
from agentflow.core.records import StepRecord


def graph_of(*nodes: dict[str, Any], edges: list[tuple[str, str, str]], start: str | None = None) -> Graph:
    config = validate_config(
        {
            "name": "g",
            "kind": "structured",
            "nodes": list(nodes),
            "edges": [{"from": s, "port": p, "to": t} for s, p, t in edges],
            **({"start": start} if start else {}),
        }
    )
    assert isinstance(config, StructuredConfig)
    return config.graph


def tool(node_id: str) -> dict[str, Any]:
    return {"id": node_id, "type": "tool", "tool": "echo"}


def merge(node_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "type": "merge", **extra}


def route(node_id: str, *ports: str) -> dict[str, Any]:
    rule = {"path": "input.n", "op": "exists"}
    return {"id": node_id, "type": "condition", "branches": [{"port": p, "when": rule} for p in ports]}


def run_one(graph: Graph, f: Frontier, port: str | None = "result", **kw: Any) -> Frontier:
    """End the first ready activation, firing ``port``."""
    return frontier.finish_activation(graph, f, f.ready[0], port, **kw)


DIAMOND = graph_of(
    route("c", "x", "y"), tool("p"), tool("q"), merge("m"), tool("end"),
    edges=[("c", "x", "p"), ("c", "y", "q"), ("p", "result", "m"), ("q", "result", "m"), ("m", "result", "end")],
)  # fmt: skip


def test_a_linear_run_keeps_the_compact_state() -> None:
    g = graph_of(tool("a"), tool("b"), edges=[("a", "result", "b")])
    f = frontier.start(g, "a")
    assert frontier.dump(f, {"vars": {"x": 1}}, g) == {"node": "a", "vars": {"x": 1}}
    f = run_one(g, f)
    assert f.ready == (Activation("b", ("a",)),)
    assert frontier.dump(f, {}, g) == {"node": "b"}
    f = run_one(g, f)
    assert f.empty and frontier.dump(f, {}, g) == {"node": None} and f.last == "b"


def test_a_branch_not_taken_is_skipped_and_the_merge_does_not_wait_for_it() -> None:
    f = run_one(DIAMOND, frontier.start(DIAMOND, "c"), "x")
    assert f.ready == (Activation("p", ("c",)),)
    assert f.skipped == ("q",)
    assert f.arrivals == {"m": {"q/result": "skipped"}}
    f = run_one(DIAMOND, f)
    assert f.ready == (Activation("m", ("p",)),), "the merge runs with the branch that ran"
    assert f.arrivals == {}
    f = run_one(DIAMOND, f)
    assert f.ready == (Activation("end", ("m",)),)


def test_parallel_branches_join_when_all_are_in() -> None:
    g = graph_of(
        tool("a"), tool("b"), tool("c"), merge("m"),
        edges=[("a", "result", "b"), ("a", "result", "c"), ("b", "result", "m"), ("c", "result", "m")],
    )  # fmt: skip
    f = run_one(g, frontier.start(g, "a"))
    assert [a.node for a in f.ready] == ["b", "c"]
    f = run_one(g, f)
    assert [a.node for a in f.ready] == ["c"] and f.arrivals == {"m": {"b/result": "fired"}}
    state = frontier.dump(f, {"vars": {}}, g)
    assert frontier.load(state, g) == f, "the full form round-trips"
    f = run_one(g, f)
    assert f.ready == (Activation("m", ("b", "c")),)


def test_a_merge_of_the_first_fires_once() -> None:
    g = graph_of(
        tool("a"), tool("b"), tool("c"), merge("m", wait="first"),
        edges=[("a", "result", "b"), ("a", "result", "c"), ("b", "result", "m"), ("c", "result", "m")],
    )  # fmt: skip
    f = run_one(g, run_one(g, frontier.start(g, "a")))
    assert [a.node for a in f.ready] == ["c", "m"]
    f = run_one(g, f)  # c arrives too: the merge has already fired
    assert [a.node for a in f.ready] == ["m"] and f.arrivals == {}


def test_a_merge_of_n_fires_at_the_nth_or_when_fewer_are_live() -> None:
    g = graph_of(
        route("r", "x"), tool("b"), tool("c"), tool("d"), merge("m", wait=2),
        edges=[("r", "x", "b"), ("r", "x", "c"), ("r", "default", "d"),
               ("b", "result", "m"), ("c", "result", "m"), ("d", "result", "m")],
    )  # fmt: skip
    f = run_one(g, frontier.start(g, "r"), "x")
    assert [a.node for a in f.ready] == ["b", "c"] and f.skipped == ("d",)
    f = run_one(g, run_one(g, f))
    assert f.ready == (Activation("m", ("b", "c")),)
    g1 = graph_of(
        route("r", "x"), tool("b"), tool("d"), merge("m", wait=2),
        edges=[("r", "x", "b"), ("r", "default", "d"), ("b", "result", "m"), ("d", "result", "m")],
    )  # fmt: skip
    f = run_one(g1, run_one(g1, frontier.start(g1, "r"), "x"))
    assert f.ready == (Activation("m", ("b",)),), "only one branch is live: it is enough"


def test_skips_propagate_through_chains_and_a_node_with_every_input_skipped() -> None:
    g = graph_of(
        route("r", "x"), tool("a1"), tool("a2"), tool("a3"), tool("b"), merge("m"), tool("z"),
        edges=[("r", "x", "a1"), ("a1", "result", "a2"), ("a2", "result", "a3"), ("a3", "result", "m"),
               ("r", "default", "b"), ("b", "result", "m"), ("m", "result", "z")],
    )  # fmt: skip
    f = run_one(g, frontier.start(g, "r"), "default")
    assert f.skipped == ("a1", "a2", "a3")
    f = run_one(g, f)  # b
    assert f.ready == (Activation("m", ("b",)),)
    f = run_one(g, frontier.start(g, "r"), None)  # fired nothing: everything after is skipped
    assert f.empty and set(f.skipped) == {"a1", "a2", "a3", "b", "m", "z"}


def test_a_node_that_does_not_join_runs_once_per_link_that_fires() -> None:
    g = graph_of(
        tool("a"), tool("b"), tool("c"), tool("t"),
        edges=[("a", "result", "b"), ("a", "result", "c"), ("b", "result", "t"), ("c", "result", "t")],
    )  # fmt: skip
    f = run_one(g, run_one(g, run_one(g, frontier.start(g, "a"))))
    assert f.ready == (Activation("t", ("b",)), Activation("t", ("c",)))


def test_the_error_port_fires_and_the_result_port_is_skipped() -> None:
    g = graph_of(
        tool("a"), tool("ok"), tool("bad"), merge("m"),
        edges=[("a", "result", "ok"), ("a", "error", "bad"), ("ok", "result", "m"), ("bad", "result", "m")],
    )  # fmt: skip
    f = run_one(g, frontier.start(g, "a"), "error")
    assert f.ready == (Activation("bad", ("a",)),) and f.skipped == ("ok",)


def test_a_wait_fires_its_port_when_the_database_time_has_come() -> None:
    g = graph_of(
        tool("a"), tool("b"), tool("c"), merge("m"),
        edges=[("a", "result", "b"), ("a", "result", "c"), ("b", "result", "m"), ("c", "result", "m")],
    )  # fmt: skip
    f = run_one(g, frontier.start(g, "a"))
    f = run_one(g, f, later=Timer("b", "result", secs=30.0))  # b waits 30 s before its links fire
    assert [a.node for a in f.ready] == ["c"] and f.timers == (Timer("b", "result", secs=30.0),)
    assert frontier.earliest(f) == (30.0, None)
    at = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
    f = replace(f, timers=(Timer("b", "result", at=at.isoformat()),))  # as the checkpoint stamps it
    assert frontier.earliest(f) == (None, at.isoformat())
    assert frontier.release(g, f, at - timedelta(seconds=1)) is f, "never before its time"
    assert frontier.release(g, f, None) is f
    f = run_one(g, f)  # c
    assert not f.ready and f.arrivals == {"m": {"c/result": "fired"}}
    f = frontier.release(g, f, at)
    assert f.ready == (Activation("m", ("c", "b")),) and not f.timers and f.last == "b"


def test_a_wait_that_ends_on_an_event_is_released_by_news_in_the_inbox() -> None:
    g = graph_of(tool("a"), tool("b"), edges=[("a", "result", "b")])
    f = run_one(g, frontier.start(g, "a"), later=Timer("a", "result", secs=3600.0, on_event=True))
    assert frontier.release(g, f, datetime.now(UTC)) is f, "not stamped yet"
    assert frontier.release(g, f, None, inbox_news=True).ready == (Activation("b", ("a",)),)
    state = frontier.dump(f, {}, g)
    assert state == {
        "ready": [],
        "timers": [{"from": "a", "port": "result", "secs": 3600.0, "event": True}],
        "last": "a",
    }


def test_old_states_load() -> None:
    g = graph_of(tool("a"), tool("b"), edges=[("a", "result", "b")])
    assert frontier.load({"node": "b"}, g) == Frontier(ready=(Activation("b", ("a",)),))
    assert frontier.load({"node": None, "after": "b"}, g) == Frontier(last="b")
    assert frontier.load({"node": None}, g).empty


def test_a_run_started_at_a_node_does_not_wait_for_branches_that_cannot_come() -> None:
    f = frontier.start_at(DIAMOND, "p", {"n": 3})
    assert f.ready == (Activation("p", (), True, {"n": 3}),)
    assert f.arrivals == {"m": {"q/result": "skipped"}}
    state = frontier.dump(f, {}, DIAMOND)
    assert state["ready"] == [{"node": "p", "via": [], "input": {"n": 3}}]
    assert frontier.load(state, DIAMOND) == f
    f = run_one(DIAMOND, f)
    assert f.ready == (Activation("m", ("p",)),)


def test_node_summaries_from_steps_and_skips() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def step(seq: int, node: str | None, status: str, attempt: int = 1) -> StepRecord:
        began = t0 + timedelta(seconds=seq)
        return StepRecord(
            seq, uuid4(), seq, attempt, node, "tool", None, status, None, None, None, "k", "w", 1,
            began, began + timedelta(milliseconds=250), 0, 0, 0, 0,  # type: ignore[arg-type]
        )  # fmt: skip

    steps = [step(0, "a", "failed"), step(0, "a", "completed", 2), step(1, None, "completed"), step(2, "t", "completed"),
             step(3, "t", "completed")]  # fmt: skip
    found = node_summaries(steps, ["x"])
    assert found["a"]["status"] == "completed" and found["a"]["attempts"] == 2 and found["a"]["runs"] == 1
    assert found["a"]["duration_ms"] == 500.0 and found["a"]["started_at"] == t0
    assert found["t"]["runs"] == 2
    assert found["x"] == {"status": "skipped", "attempts": 0, "runs": 0}
    assert set(found) == {"a", "t", "x"}


FAN = graph_of(
    tool("a"), tool("b"), tool("c"), merge("m"),
    edges=[("a", "result", "b"), ("a", "result", "c"), ("b", "result", "m"), ("c", "result", "m")],
)  # fmt: skip


def test_only_a_port_with_several_links_fans_out() -> None:
    assert FAN.fans_out
    assert not DIAMOND.fans_out, "a condition's branches leave by different ports"
    assert not graph_of(tool("a"), tool("b"), edges=[("a", "result", "b")]).fans_out


def test_started_activations_keep_their_numbers_in_the_state() -> None:
    f = run_one(FAN, frontier.start(FAN, "a"))
    marked = frontier.mark_started(f, {0: 7, 1: 8})
    assert [a.seq for a in marked.ready] == [7, 8]
    assert frontier.mark_started(marked, {0: 99}).ready[0].seq == 7, "a number once given stays"
    state = frontier.dump(marked, {}, FAN)
    assert state["ready"] == [{"node": "b", "via": ["a"], "seq": 7}, {"node": "c", "via": ["a"], "seq": 8}]
    assert frontier.load(state, FAN) == marked
    g = graph_of(tool("a"), tool("b"), edges=[("a", "result", "b")])
    numbered = frontier.mark_started(frontier.start(g, "a"), {0: 0})
    assert "ready" in frontier.dump(numbered, {}, g), "a numbered activation is never compact"


def test_a_failed_activation_retries_on_its_own_under_its_number() -> None:
    f = frontier.mark_started(run_one(FAN, frontier.start(FAN, "a")), {0: 1, 1: 2})
    b = f.ready[0]
    later = frontier.retry_later(f, b, 1, 0.5)
    assert [a.node for a in later.ready] == ["c"] and later.timers[0].retry == replace(b, failures=1)
    state = frontier.dump(later, {}, FAN)
    assert state["timers"] == [
        {"from": "b", "port": "", "secs": 0.5, "retry": {"node": "b", "via": ["a"], "seq": 1, "failures": 1}}
    ]
    at = datetime(2026, 1, 1, tzinfo=UTC)
    stamped = frontier.load({**state, "timers": [{**state["timers"][0], "at": at.isoformat()}]}, FAN)
    assert frontier.release(FAN, stamped, at - timedelta(seconds=1)) is stamped
    again = frontier.release(FAN, stamped, at)
    assert again.ready == (f.ready[1], replace(b, failures=1)) and not again.timers
    assert again.last == stamped.last, "a retry fires no port"


def test_timers_release_in_the_order_they_fell_due() -> None:
    g = graph_of(
        tool("a"), tool("b"), tool("c"), tool("x"), tool("y"),
        edges=[("a", "result", "b"), ("a", "result", "c"), ("b", "result", "x"), ("c", "result", "y")],
    )  # fmt: skip
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    late = Timer("b", "result", at=(t0 + timedelta(seconds=2)).isoformat())
    soon = Timer("c", "result", at=(t0 + timedelta(seconds=1)).isoformat())
    f = Frontier(timers=(late, soon))
    assert [a.node for a in frontier.release(g, f, t0 + timedelta(seconds=1)).ready] == ["y"]
    # Looked at later, the one due first still comes first: it keeps the same step number.
    both = frontier.release(g, f, t0 + timedelta(seconds=5))
    assert [a.node for a in both.ready] == ["y", "x"] and both.last == "b"
