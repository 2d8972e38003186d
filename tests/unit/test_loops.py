"""for_each: its publish rules, and how its items start, are released, fail and join."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from agentflow.core import loops
from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ConfigError
from agentflow.core.graph import frontier
from agentflow.core.graph.looping import MAX_POLL_SECONDS, ForEachNode, LoopProgress, loop_results
from agentflow.core.statuses import RunStatus


def config_of(*extra_edges: tuple[str, str, str], **loop: Any) -> dict[str, Any]:
    edges = [("start", "result", "each"), ("each", "iteration", "enrich"), ("enrich", "result", "score"),
             ("each", "done", "summary"), *extra_edges]  # fmt: skip
    return {
        "name": "loop",
        "kind": "structured",
        "nodes": [
            {"id": "start", "type": "tool", "tool": "echo"},
            {"id": "each", "type": "for_each", "items": "{{ input.rows }}", **loop},
            {"id": "enrich", "type": "tool", "tool": "echo", "args": {"value": "{{ input.name }}"}},
            {"id": "score", "type": "tool", "tool": "echo"},
            {"id": "summary", "type": "finish", "output": "{{ input | length }}"},
        ],
        "edges": [{"from": s, "port": p, "to": t} for s, p, t in edges],
    }


def loaded(**loop: Any) -> StructuredConfig:
    config = validate_config(config_of(**loop))
    assert isinstance(config, StructuredConfig)
    return config


def errors_of(data: dict[str, Any]) -> list[dict[str, str]]:
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    errors: list[dict[str, str]] = info.value.info.details["errors"]
    return errors


def test_a_loop_and_its_body_publish() -> None:
    config = loaded(concurrency=3)
    each = config.node("each")
    assert isinstance(each, ForEachNode) and each.output_ports() == ("iteration", "done", "error")
    assert each.port_schema("done") == {"type": "array"}


def test_a_loop_needs_exactly_one_edge_into_its_body() -> None:
    found = errors_of(config_of(("each", "iteration", "score")))
    assert found == [
        {
            "path": "nodes[1]",
            "message": "for_each 'each' needs exactly one edge from its 'iteration' port, to the first node of its "
            "body; it has 2",
        }
    ]


def test_a_body_cannot_lead_out_of_the_loop() -> None:
    found = errors_of(config_of(("score", "result", "summary")))
    assert found == [
        {
            "path": "edges[4]",
            "message": "'score' is in the body of for_each 'each' and cannot lead out of it (to 'summary'); "
            "results leave by the loop's ports",
        }
    ]


def test_nothing_else_may_enter_a_body() -> None:
    # 'score' is reached from outside the loop too, so the body ('enrich') leaks into it.
    found = errors_of(config_of(("start", "result", "score")))
    assert found == [
        {
            "path": "edges[2]",
            "message": "'enrich' is in the body of for_each 'each' and cannot lead out of it (to 'score'); "
            "results leave by the loop's ports",
        }
    ]
    entering = config_of()
    entering["nodes"].append({"id": "side", "type": "tool", "tool": "echo"})
    entering["nodes"][4] = {"id": "summary", "type": "tool", "tool": "echo"}
    entering["edges"] += [{"from": "summary", "to": "side"}, {"from": "side", "to": "enrich"}]
    found = errors_of(entering)
    assert {"path": "edges[5]", "message": "'side' leads into the body of for_each 'each' (to 'enrich'); only its "
            "'iteration' port may"} in found, found  # fmt: skip
    assert {"path": "edges[2]", "message": "'enrich' is in the body of for_each 'each' and cannot lead out of it "
            "(to 'score'); results leave by the loop's ports"} in found, found  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value"),
    [("concurrency", 0), ("concurrency", 101), ("max_items", 0), ("on_item_error", "ignore")],
)
def test_loop_settings_are_bounded(field: str, value: Any) -> None:
    assert errors_of(config_of(**{field: value}))[0]["path"] == f"nodes[1].{field}"


def started(config: StructuredConfig, items: list[Any]) -> Any:
    state = frontier.dump(
        frontier.Frontier(ready=(frontier.Activation("each", ("start",)),)), {}, config.graph
    )
    node = config.node("each")
    assert isinstance(node, ForEachNode)
    return loops.on_loop_start(config, state, node, items, seq=4)


def test_items_start_as_children_the_first_ones_released() -> None:
    config = loaded(concurrency=2)
    t = started(config, [{"name": "a"}, {"name": "b"}, {"name": "c"}])
    assert t.status is RunStatus.WAITING and t.reason == "loop" and t.wake_after == timedelta(seconds=1)
    assert [(c["item_index"], c["released"]) for c in t.children] == [(0, True), (1, True), (2, False)]
    assert t.children[2]["state"] == {"ready": [{"node": "enrich", "via": [], "input": {"name": "c"}}]}
    assert t.state["loops"] == [{"node": "each", "seq": 4, "total": 3, "released": 2, "via": ["start"]}]
    assert t.state["ready"] == []


def test_an_empty_list_fires_done_at_once() -> None:
    t = started(loaded(), [])
    assert t.status is RunStatus.IN_PROGRESS and t.state == {"node": "summary"} and not t.children


def test_a_wake_releases_more_items_up_to_the_concurrency() -> None:
    config = loaded(concurrency=2)
    t = started(config, list(range(5)))
    woke = loops.on_loop_wake(config, t.state, {4: LoopProgress(completed=1)})
    assert woke.node_id is None and woke.transition.release == ((4, 3),)
    assert woke.transition.state["loops"][0]["released"] == 3
    assert woke.transition.status is RunStatus.WAITING
    idle = loops.on_loop_wake(config, woke.transition.state, {4: LoopProgress(completed=1)})
    assert idle.transition.release == (), "two are running: nothing more to release"


def test_a_quiet_loop_counts_less_often_and_news_brings_it_back() -> None:
    config = loaded(concurrency=2)
    state = started(config, list(range(5))).state
    waits = []
    for _ in range(12):  # two running, none ended: nothing new each time
        t = loops.on_loop_wake(config, state, {4: LoopProgress()}).transition
        state = t.state
        assert t.wake_after is not None
        waits.append(t.wake_after.total_seconds())
    assert waits[:5] == [2.0, 4.0, 8.0, 16.0, 32.0]
    assert waits[-1] == MAX_POLL_SECONDS, "never longer than the cap"
    assert state["loops"][0]["quiet"] == 12
    news = loops.on_loop_wake(config, state, {4: LoopProgress(completed=1)}).transition
    assert news.wake_after == timedelta(seconds=1) and "quiet" not in news.state["loops"][0]
    assert news.state["loops"][0]["ended"] == 1
    again = loops.on_loop_wake(config, news.state, {4: LoopProgress(completed=1)}).transition
    assert again.wake_after == timedelta(seconds=2), "the same count again is nothing new"


def test_when_every_item_ended_the_loop_joins_in_order() -> None:
    config = loaded(on_item_error="collect")
    t = started(config, ["a", "b"])
    ended = [
        {"status": "failed", "output": None, "error": {"code": "x"}},
        {"status": "completed", "output": 2, "error": None},
    ]
    woke = loops.on_loop_wake(
        config, t.state, {4: LoopProgress(completed=1, failed=1, first_failed=0, items=ended)}
    )
    assert woke.node_id == "each" and woke.output == [{"error": {"code": "x"}}, 2]
    assert woke.transition.state == {"node": "summary"}
    assert loop_results("skip", ended) == [2]


def test_a_failed_item_fails_the_loop_and_cancels_the_rest() -> None:
    config = loaded()
    t = started(config, ["a", "b", "c"])
    seen = {
        4: LoopProgress(completed=1, failed=1, first_failed=1, first_error={"code": "boom", "message": "no"})
    }
    woke = loops.on_loop_wake(config, t.state, seen)
    failed = woke.transition
    assert failed.status is RunStatus.FAILED and failed.cancel_loops == (4,)
    assert failed.error is not None and failed.error.code == "loop_item_failed"
    assert failed.error.message == "item 1 of for_each 'each' failed: boom: no"
    # The loop stays where it was: a retried run waits for it again (the retry runs the
    # items that did not complete once more and keeps the others).
    assert failed.state["loops"] == t.state["loops"] and failed.state["ready"] == []
    handled_config = validate_config(
        {**config_of(), "nodes": [*config_of()["nodes"], {"id": "oops", "type": "finish", "output": "{{ input.code }}"}],
         "edges": [*config_of()["edges"], {"from": "each", "port": "error", "to": "oops"}]}
    )  # fmt: skip
    assert isinstance(handled_config, StructuredConfig)
    t = started(handled_config, ["a"])
    handled = loops.on_loop_wake(handled_config, t.state, seen).transition
    assert handled.handled and handled.cancel_loops == (4,)
    assert handled.state["ready"] == [{"node": "oops", "via": ["each"]}] and handled.state["skipped"] == [
        "summary"
    ]
