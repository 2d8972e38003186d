"""What changed between two configs: fields by path, nodes matched by id, and a YAML diff."""

from __future__ import annotations

from agentflow.core.config_diff import MAX_CHANGES, diff_configs, unified_yaml

BEFORE = {
    "name": "refund",
    "kind": "structured",
    "nodes": [
        {"id": "ask", "type": "user_input", "message": "Refund?"},
        {"id": "done", "type": "finish", "output": "ok"},
    ],
    "retry": {"max_attempts": 3},
}


def test_fields_are_named_by_path_and_nodes_by_id_not_position() -> None:
    after = {
        "name": "refund",
        "kind": "structured",
        "nodes": [
            {"id": "check", "type": "mapping", "output": {}},
            {"id": "ask", "type": "user_input", "message": "Refund now?", "wait": "1d"},
            {"id": "done", "type": "finish", "output": "ok"},
        ],
        "description": "refunds",
    }
    changes = {(c["path"], c["change"]) for c in diff_configs(BEFORE, after)}
    assert changes == {
        ("nodes[id=ask].message", "changed"),
        ("nodes[id=ask].wait", "added"),
        ("nodes[id=check]", "added"),
        ("retry", "removed"),
        ("description", "added"),
    }
    message = next(c for c in diff_configs(BEFORE, after) if c["path"] == "nodes[id=ask].message")
    assert (message["before"], message["after"]) == ("Refund?", "Refund now?")


def test_equal_configs_have_no_changes_and_lists_without_ids_compare_whole() -> None:
    assert diff_configs(BEFORE, BEFORE) == []
    assert diff_configs({"tools": ["a", "b"]}, {"tools": ["b", "a"]}) == [
        {"path": "tools", "change": "changed", "before": ["a", "b"], "after": ["b", "a"]}
    ]
    assert (
        diff_configs({"nodes": [{"id": "a"}]}, {"nodes": [{"id": "a"}, {"id": "b"}], "x": 1})[0]["path"]
        == "nodes[id=b]"
    )
    assert diff_configs(1, 2) == [{"path": "(config)", "change": "changed", "before": 1, "after": 2}]  # type: ignore[arg-type]


def test_a_huge_difference_is_cut_at_the_limit() -> None:
    many = {f"k{i}": i for i in range(MAX_CHANGES + 50)}
    assert len(diff_configs({}, many)) == MAX_CHANGES


def test_the_unified_diff_shows_the_changed_lines_as_yaml() -> None:
    after = {**BEFORE, "retry": {"max_attempts": 5}}
    text = unified_yaml(BEFORE, after, ("v1", "v2"))
    assert text.startswith("--- v1\n+++ v2\n")
    assert "-  max_attempts: 3\n" in text and "+  max_attempts: 5\n" in text
    assert unified_yaml(BEFORE, BEFORE, ("v1", "v1")) == ""
