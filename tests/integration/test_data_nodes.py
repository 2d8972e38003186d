"""The data nodes end to end on the real database: mapping, filter, sort."""

from __future__ import annotations

from typing import Any

import pytest

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.engine import Engine
from agentflow.runtime.worker import Worker

ORDERS = {
    "customer": {"name": "Ann", "tier": "gold"},
    "orders": [
        {"id": 1, "total": 30, "status": "open"},
        {"id": 2, "total": 500, "status": "shipped"},
        {"id": 3, "total": 120, "status": "open"},
        {"id": 4, "status": "open"},
    ],
}


def flow(name: str, *nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "nodes": list(nodes), **extra}


async def finished(engine: Engine, name: str, payload: Any) -> Any:
    run = await engine.start_run(name, payload)
    return await engine.wait_for_run(run.id, timeout=15)


async def test_filter_sort_and_mapping_shape_data_between_nodes(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow(
            "shaping",
            {"id": "open", "type": "filter", "items": "{{ input.orders }}",
             "where": {"path": "item.status", "op": "equals", "value": "open"}},
            {"id": "biggest", "type": "sort", "by": "total", "order": "desc"},
            {"id": "summary", "type": "mapping",
             "output": {"who": "{{ payload.customer.name }}", "ids": "{{ input | map(attribute='id') | list }}",
                        "top": {"id": "{{ input[0].id }}"}}},
            {"id": "names", "type": "mapping", "expression": "{who: input.who, first: input.top.id, count: length(input.ids)}"},
            {"id": "done", "type": "finish", "output": "{{ input }}"},
        )
    )  # fmt: skip
    done = await finished(engine, "shaping", ORDERS)
    assert done.status == "completed", done.error
    assert done.output == {"who": "Ann", "first": 3, "count": 3}
    steps = {s.node_id: s for s in await engine.list_steps(done.id)}
    assert [o["id"] for o in steps["open"].output] == [1, 3, 4]  # type: ignore[union-attr]
    assert [o["id"] for o in steps["biggest"].output] == [3, 1, 4], "missing totals go last"  # type: ignore[union-attr]
    assert steps["summary"].output == {"who": "Ann", "ids": [3, 1, 4], "top": {"id": 3}}


async def test_a_mapping_declares_its_keys_so_a_wrong_input_reference_is_refused_at_publish(
    engine: Engine,
) -> None:
    with pytest.raises(Exception, match=r"input\.top\.name.*'summary' \(mapping\) cannot produce it") as info:
        await engine.publish_workflow(
            flow(
                "shaping-typo",
                {"id": "summary", "type": "mapping", "output": {"top": {"id": "{{ input.x }}"}}},
                {"id": "done", "type": "finish", "output": "{{ input.top.name }}"},
            )
        )
    assert "it sends top" in str(info.value)


@pytest.mark.parametrize(
    ("node", "code", "words"),
    [
        ({"id": "f", "type": "filter", "items": "{{ input.customer }}", "where": {"path": "item.x", "op": "exists"}},
         "input_not_a_list", "node 'f' field items must give a list, not dict"),
        ({"id": "s", "type": "sort", "items": "{{ [1, 'a', 2] }}"}, "sort_incomparable",
         "node 's' cannot order number and string values"),
        ({"id": "s", "type": "sort", "items": "{{ input.orders }}"}, "sort_incomparable", "cannot order object values"),
        ({"id": "m", "type": "mapping", "expression": "length(input.orders[0].total)"}, "mapping_failed",
         "node 'm' expression failed on this input"),
    ],
)  # fmt: skip
async def test_data_a_node_cannot_use_fails_with_a_code_naming_the_node(
    engine: Engine, worker: Worker, node: dict[str, Any], code: str, words: str
) -> None:
    await engine.publish_workflow(flow(f"bad-{node['id']}-{code}", node))
    done = await finished(engine, f"bad-{node['id']}-{code}", ORDERS)
    assert done.status == "failed"
    assert done.error is not None and done.error["code"] == code and words in done.error["message"], (
        done.error
    )
    assert len(await engine.list_steps(done.id)) == 1, "not retried: the data will not change"


async def test_output_params_shape_what_is_stored_and_what_the_next_node_sees(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(
        flow(
            "declared",
            {"id": "lookup", "type": "tool", "tool": "echo", "args": {"value": "42"},
             "output_params": {"value": {"type": "integer"}, "owner": {"type": "string", "default": "nobody"}}},
            {"id": "done", "type": "finish", "output": "{{ input }}"},
        )
    )  # fmt: skip
    done = await finished(engine, "declared", {})
    assert done.status == "completed", done.error
    assert done.output == {"value": 42, "owner": "nobody"}
    assert (await engine.list_steps(done.id))[0].output == {"value": 42, "owner": "nobody"}


async def test_a_tool_node_given_arguments_its_tool_cannot_take_fails_naming_the_node(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(
        flow(
            "bad-args", {"id": "sum", "type": "tool", "tool": "add", "args": {"a": "{{ payload.x }}", "b": 1}}
        )
    )
    done = await finished(engine, "bad-args", {"x": "seven"})
    assert done.status == "failed" and done.error is not None
    assert done.error["code"] == "invalid_tool_args" and done.error["details"]["node"] == "sum"
    assert done.error["message"].startswith("node 'sum': arguments for tool 'add' are invalid: a: ")
