"""Publishing a graph: one test per rule, each checking the path and the message."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Literal

import pytest

from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ConfigError
from agentflow.core.graph.checks import check_inputs
from agentflow.core.graph.model import Edge, build_graph
from agentflow.core.node_specs import NODE_SPECS, NodeSpec, ToolNode, register_node_spec


def graph(*nodes: dict[str, Any], edges: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"name": "g", "kind": "structured", "nodes": list(nodes), **extra}
    if edges is not None:
        config["edges"] = edges
    return config


def tool(node_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "type": "tool", "tool": "echo", **extra}


def finish(node_id: str = "end", output: Any = None) -> dict[str, Any]:
    return {"id": node_id, "type": "finish", "output": output}


def errors_of(config: dict[str, Any]) -> list[dict[str, str]]:
    with pytest.raises(ConfigError) as info:
        validate_config(config)
    assert info.value.info.code == "config_invalid"
    errors: list[dict[str, str]] = info.value.info.details["errors"]
    return errors


def test_a_linear_config_without_edges_runs_in_list_order_as_before() -> None:
    config = validate_config(graph(tool("a"), tool("b"), finish()))
    assert isinstance(config, StructuredConfig)
    assert config.start_id == "a"
    assert [config.next_id(config.node(n)) for n in ("a", "b", "end")] == ["b", "end", None]
    assert "edges" not in config.model_dump(exclude_none=True)  # old configs keep their content hash


def test_next_is_shorthand_for_a_result_edge() -> None:
    by_next = validate_config(graph(tool("a", next="c"), finish("b"), tool("c", next="b")))
    by_edges = validate_config(
        graph(
            tool("a"), finish("b"), tool("c"),
            edges=[{"from": "a", "to": "c"}, {"from": "c", "port": "result", "to": "b"}],
        )
    )  # fmt: skip
    assert isinstance(by_next, StructuredConfig) and isinstance(by_edges, StructuredConfig)
    for config in (by_next, by_edges):
        assert config.start_id == "a"
        assert [config.next_id(config.node(n)) for n in ("a", "c", "b")] == ["c", "b", None]
        assert config.predecessors("b") == ["c"]


def test_with_edges_there_is_no_list_order_and_the_start_is_the_only_root() -> None:
    config = validate_config(
        graph(tool("x"), finish("y"), tool("w"), edges=[{"from": "w", "to": "x"}, {"from": "x", "to": "y"}])
    )
    assert isinstance(config, StructuredConfig)
    assert config.start_id == "w"
    assert config.next_id(config.node("y")) is None


def test_edges_are_stored_with_from_and_their_port() -> None:
    config = validate_config(graph(tool("a"), finish("b"), edges=[{"from": "a", "to": "b"}]))
    assert config.model_dump(mode="json", exclude_none=True)["edges"] == [
        {"from": "a", "port": "result", "to": "b"}
    ]


def test_unknown_node_kind_is_named_with_the_known_ones() -> None:
    errors = errors_of(graph(tool("a"), {"id": "b", "type": "teleport"}))
    assert errors == [
        {
            "path": "nodes[1].type",
            "message": "unknown node type 'teleport'; known: agent, condition, filter, finish, for_each, http_request, llm, mapping, mcp_tool, memory, merge, run_code, run_employee, run_workflow, send_message, sort, split, tool, user_input, wait, wait_callback",
        }
    ]


def test_bad_config_of_a_node_is_named_by_its_path() -> None:
    errors = errors_of(graph({"id": "nap", "type": "wait", "duration": "5m", "until": "{{ payload.t }}"}))
    assert errors == [
        {"path": "nodes[0]", "message": "a wait node needs exactly one of 'duration' or 'until'"}
    ]


def test_an_edge_from_a_port_the_kind_does_not_have() -> None:
    errors = errors_of(graph(tool("a"), finish("b"), edges=[{"from": "a", "port": "true", "to": "b"}]))
    assert errors == [
        {"path": "edges[0].port", "message": "node 'a' (tool) has no port 'true'; its ports: result, error"}
    ]


def test_an_edge_or_next_from_a_node_without_ports() -> None:
    errors = errors_of(graph(tool("a"), finish("b", output=1) | {"next": "c"}, tool("c")))
    assert errors == [
        {
            "path": "nodes[1].next",
            "message": "node 'b' (finish) has no port 'result'; its ports: none: the run ends there",
        }
    ]


def test_edges_to_and_from_missing_nodes() -> None:
    errors = errors_of(
        graph(tool("a"), finish("b"), edges=[{"from": "a", "to": "nowhere"}, {"from": "ghost", "to": "b"}])
    )
    assert errors == [
        {"path": "edges[0].to", "message": "no node has id 'nowhere'"},
        {"path": "edges[1].from", "message": "no node has id 'ghost'"},
    ]
    assert errors_of(graph(tool("a", next="nowhere"))) == [
        {"path": "nodes[0].next", "message": "no node has id 'nowhere'"}
    ]


def test_an_edge_with_a_malformed_end_is_refused_by_shape() -> None:
    errors = errors_of(graph(tool("a"), edges=[{"from": "a", "to": "b c", "color": "red"}]))
    assert {e["path"] for e in errors} == {"edges[0].to", "edges[0].color"}


def test_unreachable_nodes() -> None:
    errors = errors_of(graph(tool("a", next="c"), tool("b"), finish("c")))
    assert errors == [{"path": "nodes[1]", "message": "node 'b' cannot be reached from the start 'a'"}]
    explicit = errors_of(
        graph(tool("a"), tool("b"), finish("c"), edges=[{"from": "b", "to": "c"}], start="b")
    )
    assert explicit == [{"path": "nodes[0]", "message": "node 'a' cannot be reached from the start 'b'"}]


def test_cycles_are_named_from_the_edge_that_closes_them() -> None:
    errors = errors_of(
        graph(
            tool("a"), tool("b"), tool("c"),
            edges=[{"from": "a", "to": "b"}, {"from": "b", "to": "c"}, {"from": "c", "to": "b"}],
        )
    )  # fmt: skip
    assert errors[0] == {
        "path": "edges[2]",
        "message": "the links form a cycle: b -> c -> b (a graph may not loop back)",
    }
    assert errors_of(graph(tool("a", next="a"), start="a"))[0]["message"].startswith(
        "the links form a cycle: a -> a"
    )


def test_a_graph_thousands_of_nodes_long_is_checked_without_running_out_of_stack() -> None:
    # The longest chain a config may hold (1,000 nodes) is as deep as Python's recursion
    # limit: the checks must not recurse per node.
    length = 999
    chain = [tool(f"n{i}") for i in range(length)]
    config = validate_config(graph(*chain, finish()))
    assert isinstance(config, StructuredConfig)
    assert config.next_id(config.node(f"n{length - 1}")) == "end"
    closing = {"from": f"n{length - 1}", "to": "n1"}
    edges = [{"from": f"n{i}", "to": f"n{i + 1}"} for i in range(length - 1)] + [closing]
    errors = errors_of(graph(*chain, edges=edges))
    assert errors[0]["path"] == f"edges[{length - 1}]"
    assert errors[0]["message"].startswith("the links form a cycle: n1 -> n2 -> ")
    assert errors[0]["message"].endswith(f"n{length - 1} -> n1 (a graph may not loop back)")


def test_a_missing_start() -> None:
    errors = errors_of(
        graph(tool("a"), tool("b"), edges=[{"from": "a", "to": "b"}, {"from": "b", "to": "a"}])
    )
    assert errors == [
        {
            "path": "start",
            "message": "every node has an incoming edge, so none can start the run; set 'start'",
        }
    ]
    assert errors_of(graph(tool("a"), start="zz")) == [{"path": "start", "message": "no node has id 'zz'"}]


def test_an_ambiguous_start() -> None:
    errors = errors_of(graph(tool("a"), tool("b"), finish("c"), edges=[{"from": "a", "to": "c"}]))
    assert errors == [
        {
            "path": "start",
            "message": "several nodes have no incoming edge (a, b), so the start is ambiguous; "
            "set 'start' to one of them and connect the others",
        }
    ]


def test_one_port_may_lead_to_several_nodes_but_not_twice_to_one() -> None:
    config = validate_config(
        graph(tool("a"), finish("b"), finish("c"), edges=[{"from": "a", "to": "b"}, {"from": "a", "to": "c"}])
    )
    assert isinstance(config, StructuredConfig)
    assert [link.target for link in config.graph.outgoing("a", "result")] == ["b", "c"]
    errors = errors_of(
        graph(tool("a"), finish("b"), edges=[{"from": "a", "to": "b"}, {"from": "a", "to": "b"}])
    )
    assert errors == [{"path": "edges[1]", "message": "'a' 'result' already leads to 'b' (edges[0])"}]


def test_duplicate_node_ids() -> None:
    errors = errors_of(graph(tool("a"), tool("a")))
    assert errors[0] == {"path": "nodes[1].id", "message": "duplicate node id 'a'"}


def test_input_references_the_predecessor_cannot_produce() -> None:
    errors = errors_of(
        graph(
            {"id": "nap", "type": "wait", "duration": "1s"},
            tool("a", args={"value": "{{ input.owner.email }}"}),
        )
    )
    assert errors == [
        {
            "path": "nodes[1].args.value",
            "message": "{{ input.owner.email }}: direct predecessor 'nap' (wait) cannot produce it on port "
            "'result'; it sends slept, until, at_most, wake_on_event, woken_by, pending",
        }
    ]


def test_input_references_that_can_be_produced_are_accepted() -> None:
    validate_config(
        graph(
            {"id": "nap", "type": "wait", "duration": "1s"},
            tool("a", args={"value": "{{ input.slept * 2 }}", "all": "{{ input }}"}),
            # A tool's output is not known before it runs, so any path may be there.
            finish("b", output="{{ input.anything[0].deep }}"),
        )
    )
    # The first node's input is the run's input: not known before it starts.
    validate_config(graph(tool("a", args={"value": "{{ input.whatever }}"})))


def test_with_several_predecessors_the_path_must_exist_in_every_one() -> None:
    # Two links into one node cannot both be live before branching nodes exist, so the rule
    # is exercised on the graph itself.
    nodes = [
        NODE_SPECS["wait"].model_validate({"id": "nap", "type": "wait", "duration": 1}),
        ToolNode(id="t", tool="echo"),
        ToolNode(id="use", tool="echo", args={"v": "{{ input.slept }}", "w": "{{ input.x }}"}),
    ]
    edges = [Edge(source="nap", to="use"), Edge(source="t", to="use")]
    shape = build_graph(nodes, edges, start="nap")
    assert check_inputs(shape) == [
        {
            "path": "nodes[2].args.w",
            "message": "{{ input.x }}: direct predecessor 'nap' (wait) cannot produce it on port 'result'; "
            "it sends slept, until, at_most, wake_on_event, woken_by, pending",
        }
    ]


class Gather(NodeSpec):
    """A test-only kind that joins its inputs."""

    joins: ClassVar[bool] = True
    type: Literal["gather"] = "gather"


@pytest.fixture
def gather_kind() -> Iterator[None]:
    register_node_spec(Gather)
    yield
    del NODE_SPECS["gather"]


def test_a_joining_node_reads_input_by_predecessor_id(gather_kind: None) -> None:
    nodes = [
        NODE_SPECS["wait"].model_validate({"id": "nap", "type": "wait", "duration": 1}),
        ToolNode(id="t", tool="echo"),
        Gather(
            id="g",
            save_to_state={"a": "{{ input.nap.slept }}", "b": "{{ input.t.x }}", "c": "{{ input.slept }}"},
        ),
    ]
    shape = build_graph(nodes, [Edge(source="nap", to="g"), Edge(source="t", to="g")], start="nap")
    assert check_inputs(shape) == [
        {
            "path": "nodes[2].save_to_state.c",
            "message": "{{ input.slept }}: a gather node sees input by predecessor id (nap, t)",
        }
    ]


def test_a_kind_registered_outside_the_engine_is_validated_like_the_built_in_ones(gather_kind: None) -> None:
    config = validate_config(graph(tool("a"), {"id": "g", "type": "gather"}))
    assert isinstance(config, StructuredConfig) and config.node("g").joins
    assert (
        errors_of(graph(tool("a"), {"id": "g", "type": "gather", "color": 1}))[0]["path"] == "nodes[1].color"
    )


def test_a_stored_version_is_parsed_without_the_publish_rules() -> None:
    # An older version may break a rule added since (here: an unreachable node); its runs
    # must still load.
    document = graph(tool("a", next="c"), tool("b"), finish("c"))
    assert errors_of(document)
    config = validate_config(document, stored=True)
    assert isinstance(config, StructuredConfig) and config.next_id(config.node("a")) == "c"


def condition(node_id: str, *ports: str, when: Any = None) -> dict[str, Any]:
    rule = when if when is not None else {"path": "input.n", "op": "gt", "value": 1}
    return {"id": node_id, "type": "condition", "branches": [{"port": p, "when": rule} for p in ports]}


def test_a_condition_has_a_port_per_branch_and_default() -> None:
    config = validate_config(
        graph(
            condition("route", "high", "low"), finish("a"), finish("b"), finish("c"),
            edges=[
                {"from": "route", "port": "high", "to": "a"},
                {"from": "route", "port": "low", "to": "b"},
                {"from": "route", "port": "default", "to": "c"},
            ],
        )
    )  # fmt: skip
    assert isinstance(config, StructuredConfig)
    assert config.node("route").output_ports() == ("high", "low", "default")
    assert [config.next_id(config.node("route"), p) for p in ("high", "low", "default")] == ["a", "b", "c"]
    assert config.next_id(config.node("route")) is None  # no result port: nothing follows in list order


def test_a_condition_port_must_be_one_of_its_branches() -> None:
    errors = errors_of(
        graph(condition("route", "high"), finish("a"), edges=[{"from": "route", "port": "result", "to": "a"}])
    )
    assert errors == [
        {
            "path": "edges[0].port",
            "message": "node 'route' (condition) has no port 'result'; its ports: high, default",
        }
    ]


@pytest.mark.parametrize(
    ("node", "path", "message"),
    [
        (condition("r", "default"), "nodes[0].branches[0].port", "'default' is a reserved port name"),
        (condition("r", "x", "x"), "nodes[0]", "branch port(s) ['x'] are used more than once"),
        (
            condition("r", "x", when={"path": "input.n", "op": "bigger", "value": 1}),
            "nodes[0].branches[0].when",
            "when.op",
        ),
        (condition("r", "x", when={"path": "input.n", "op": "gt"}), "nodes[0].branches[0].when", "when"),
        ({"id": "r", "type": "condition", "branches": []}, "nodes[0].branches", "at least 1 item"),
    ],
)
def test_condition_config_errors(node: dict[str, Any], path: str, message: str) -> None:
    errors = errors_of(graph(node))
    assert errors[0]["path"] == path and message in errors[0]["message"], errors


def test_an_error_edge_is_allowed_from_kinds_that_can_fail() -> None:
    config = validate_config(
        graph(tool("a"), finish("ok"), finish("bad", output="{{ input.code }}: {{ input.message }}"),
              edges=[{"from": "a", "to": "ok"}, {"from": "a", "port": "error", "to": "bad"}])
    )  # fmt: skip
    assert isinstance(config, StructuredConfig) and config.next_id(config.node("a"), "error") == "bad"
    errors = errors_of(
        graph(
            tool("a"),
            finish("bad", output="{{ input.status_code }}"),
            edges=[{"from": "a", "port": "error", "to": "bad"}],
        )
    )
    assert errors == [
        {
            "path": "nodes[1].output",
            "message": "{{ input.status_code }}: direct predecessor 'a' (tool) cannot produce it on port 'error'; "
            "it sends code, message, details, solution",
        }
    ]
