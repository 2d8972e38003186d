"""The data nodes end to end on the real database: mapping, filter, sort, split."""

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


@pytest.mark.parametrize(
    ("node", "code", "got", "words"),
    [
        ({"id": "p", "type": "split", "items": "{{ input.customer }}", "size": 2}, "input_not_a_list", "dict",
         "node 'p' field items must give a list, not dict"),
        ({"id": "g", "type": "split", "items": "{{ input.orders[0].id }}", "by": "status"}, "input_not_a_list", "int",
         "node 'g' field items must give a list, not int"),
        ({"id": "t", "type": "split", "items": "{{ input.orders }}", "separator": ","}, "input_not_a_string", "list",
         "node 't' field items must give a string to cut at separator, not list"),
    ],
)  # fmt: skip
async def test_a_split_given_the_wrong_kind_of_input_fails_naming_the_node_and_what_it_got(
    engine: Engine, worker: Worker, node: dict[str, Any], code: str, got: str, words: str
) -> None:
    await engine.publish_workflow(flow(f"bad-split-{node['id']}", node))
    done = await finished(engine, f"bad-split-{node['id']}", ORDERS)
    assert done.status == "failed" and done.error is not None
    assert done.error["code"] == code and words in done.error["message"], done.error
    assert {k: done.error["details"][k] for k in ("node", "field", "got")} == {
        "node": node["id"],
        "field": "items",
        "got": got,
    }
    assert len(await engine.list_steps(done.id)) == 1, "not retried: the data will not change"


async def test_split_by_size_feeds_a_for_each_one_chunk_per_item(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow(
            "batches",
            {"id": "cut", "type": "split", "items": "{{ input.orders }}", "size": 3},
            {"id": "each", "type": "for_each", "items": "{{ input.chunks }}", "concurrency": 2},
            {"id": "batch", "type": "mapping",
             "output": {"ids": "{{ input | map(attribute='id') | list }}", "n": "{{ input | length }}"}},
            {"id": "done", "type": "finish", "output": "{{ input }}"},
            edges=[{"from": "cut", "to": "each"}, {"from": "each", "port": "iteration", "to": "batch"},
                   {"from": "each", "port": "done", "to": "done"}],
        )
    )  # fmt: skip
    orders = [{"id": i} for i in range(1, 8)]
    done = await finished(engine, "batches", {"orders": orders})
    assert done.status == "completed", done.error
    assert done.output == [{"ids": [1, 2, 3], "n": 3}, {"ids": [4, 5, 6], "n": 3}, {"ids": [7], "n": 1}]
    cut = next(s for s in await engine.list_steps(done.id) if s.node_id == "cut")
    assert cut.output == {"chunks": [orders[0:3], orders[3:6], orders[6:]], "count": 3}


async def test_split_by_a_field_groups_items_in_order_of_first_appearance(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(
        flow(
            "grouping",
            {"id": "tiers", "type": "split", "items": "{{ input.rows }}", "by": "customer.tier"},
            {"id": "done", "type": "finish",
             "output": {"first": "{{ input.groups[0].key }}", "count": "{{ input.count }}", "all": "{{ input }}"}},
        )
    )  # fmt: skip
    tiers: list[Any] = ["gold", "silver", "gold", None, 1, True, 1.0, {"a": [1]}, {"a": [1]}]
    rows = [{"id": i, "customer": {"tier": tier}} for i, tier in enumerate(tiers)] + [{"id": 9}]
    done = await finished(engine, "grouping", {"rows": rows})
    assert done.status == "completed", done.error
    groups = done.output["all"]["groups"]
    assert [(g["key"], [r["id"] for r in g["items"]]) for g in groups] == [
        ("gold", [0, 2]),
        ("silver", [1]),
        (None, [3, 9]),  # a null field and a missing one: one group, key null
        (1, [4, 6]),  # 1 and 1.0 are one JSON number ...
        (True, [5]),  # ... and true is not 1
        ({"a": [1]}, [7, 8]),  # objects are keys by content
    ]
    assert groups[1]["items"] == [rows[1]], "each group keeps its items whole"
    assert done.output["first"] == "gold" and done.output["count"] == 6


@pytest.mark.parametrize(
    ("text", "separator", "parts"),
    [
        ("a,b,,c", ",", ["a", "b", "", "c"]),
        ("red | green | blue", " | ", ["red", "green", "blue"]),
        ("one", ",", ["one"]),
        ("", ",", []),
    ],
)
async def test_split_cuts_a_string_at_its_separator(
    engine: Engine, worker: Worker, text: str, separator: str, parts: list[str]
) -> None:
    await engine.publish_workflow(
        flow(
            "cutting",
            {"id": "words", "type": "split", "items": "{{ input.line }}", "separator": separator},
            {"id": "each", "type": "for_each", "items": "{{ input.parts }}"},
            {"id": "shout", "type": "mapping", "output": {"word": "{{ input | upper }}"}},
            {"id": "done", "type": "finish", "output": "{{ input }}"},
            edges=[{"from": "words", "to": "each"}, {"from": "each", "port": "iteration", "to": "shout"},
                   {"from": "each", "port": "done", "to": "done"}],
        )
    )  # fmt: skip
    done = await finished(engine, "cutting", {"line": text})
    assert done.status == "completed", done.error
    assert done.output == [{"word": part.upper()} for part in parts]
    words = next(s for s in await engine.list_steps(done.id) if s.node_id == "words")
    assert words.output == {"parts": parts, "count": len(parts)}


async def test_a_split_declares_its_mode_so_a_wrong_input_reference_is_refused_at_publish(
    engine: Engine,
) -> None:
    with pytest.raises(Exception, match=r"input\.groups.*'cut' \(split\) cannot produce it") as info:
        await engine.publish_workflow(
            flow(
                "split-typo",
                {"id": "cut", "type": "split", "size": 10},
                {"id": "each", "type": "for_each", "items": "{{ input.groups }}"},
                {"id": "body", "type": "mapping", "output": {"n": "{{ input | length }}"}},
                {"id": "done", "type": "finish"},
                edges=[
                    {"from": "cut", "to": "each"},
                    {"from": "each", "port": "iteration", "to": "body"},
                    {"from": "each", "port": "done", "to": "done"},
                ],
            )
        )
    assert "it sends chunks, count" in str(info.value)


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
