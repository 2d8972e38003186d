"""Where a run's state fits another version (``core.run_moves``)."""

from __future__ import annotations

from typing import Any

from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.run_moves import move_problems, moved_state

WAIT = {"id": "nap", "type": "wait", "duration": "1h"}


def graph(*nodes: dict[str, Any], **extra: Any) -> StructuredConfig:
    config = validate_config({"name": "g", "kind": "structured", "nodes": list(nodes), **extra})
    assert isinstance(config, StructuredConfig)
    return config


def test_the_nodes_a_frontier_names_must_exist() -> None:
    here = graph(WAIT, {"id": "end", "type": "finish"})
    assert move_problems({"node": "nap"}, here) == []
    assert move_problems({"node": "gone"}, here) == [
        "node 'gone', which it runs next, is not in this version"
    ]
    assert move_problems({"node": None, "after": "gone"}, here) == [
        "node 'gone', which it would complete with, is not in this version"
    ]
    timers = {"ready": [], "timers": [{"from": "nap", "port": "result", "at": "2026-01-01T00:00:00+00:00"}]}
    assert move_problems(timers, here) == []
    bad_port = {
        "ready": [],
        "timers": [{"from": "nap", "port": "elsewhere", "at": "2026-01-01T00:00:00+00:00"}],
    }
    assert move_problems(bad_port, here) == ["node 'nap' has no port 'elsewhere' for its timer to fire"]
    missing = {"ready": [{"node": "gone"}], "timers": [{"from": "zzz", "port": "result"}], "last": "x"}
    assert len(move_problems(missing, here)) == 3


def test_a_join_keeps_the_links_it_has_seen() -> None:
    a = {"id": "a", "type": "mapping", "output": {"v": 1}}
    b = {"id": "b", "type": "mapping", "output": {"v": 2}}
    join = {"id": "j", "type": "merge"}
    edges = [
        {"from": "s", "to": "a"},
        {"from": "s", "to": "b"},
        {"from": "a", "to": "j"},
        {"from": "b", "to": "j"},
    ]
    start = {"id": "s", "type": "mapping", "output": {"v": 0}}
    here = graph(start, a, b, join, edges=edges)
    seen = {"ready": [{"node": "b", "via": ["s"]}], "arrivals": {"j": {"a/result": "fired"}}}
    assert move_problems(seen, here) == []
    elsewhere = graph(
        start, a, b, join, edges=[e for e in edges if e["from"] != "a"] + [{"from": "a", "to": "b"}]
    )
    assert move_problems(seen, elsewhere) == [
        "the link a/result -> j its join has seen is not in this version"
    ]


def test_a_running_loop_does_not_move_and_agents_always_do() -> None:
    here = graph(WAIT)
    assert move_problems({"ready": [], "loops": [{"node": "nap", "seq": 1, "total": 3, "released": 3}]}, here)
    agent = validate_config({"name": "a", "kind": "agent", "prompt": "Go."})
    assert move_problems({"plan": None, "anything": 1}, agent) == []
    assert moved_state({"x": 1}, agent) == {"x": 1}


def test_variables_must_be_declared_with_their_types_and_new_ones_get_defaults() -> None:
    here = graph(WAIT, state_definition={"n": {"type": "number"}, "tag": {"type": "string", "default": "t"}})
    assert move_problems({"node": "nap", "vars": {"n": 2}}, here) == []
    assert move_problems({"node": "nap", "vars": {"n": "two"}}, here)[0].startswith(
        "its variable 'n' must be"
    )
    assert move_problems({"node": "nap", "vars": {"m": 1}}, here)[0].startswith(
        "its variable 'm' is not declared"
    )
    assert moved_state({"node": "nap", "vars": {"n": 2}}, here) == {
        "node": "nap",
        "vars": {"n": 2, "tag": "t"},
    }
    assert moved_state({"node": "nap"}, graph(WAIT)) == {"node": "nap"}
