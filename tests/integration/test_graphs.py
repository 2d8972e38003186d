"""Graphs on the real database: edges, ``{{ input }}``, old versions, new kinds, the catalog."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, ClassVar, Literal

import httpx
import jsonschema
import pytest

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.api.app import create_app
from agentflow.core.config_validation import content_hash
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.node_specs import NODE_SPECS, NodeSpec, register_node_spec
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.engine import Engine
from agentflow.nodes.base import BaseRunner, NodeEnv
from agentflow.nodes.registry import RUNNERS, register_runner
from agentflow.runtime.worker import Worker
from agentflow.store import workflows
from tests.support.http_server import serve


def flow(name: str, *nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "nodes": list(nodes), **extra}


async def test_a_graph_with_edges_runs_and_each_node_sees_its_predecessors_output(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(
        flow(
            "edged",
            {
                "id": "end",
                "type": "finish",
                "output": {"last": "{{ input.value }}", "first": "{{ steps.double }}"},
            },
            {"id": "shout", "type": "tool", "tool": "echo", "args": {"value": "{{ input * 10 }}"}},
            {
                "id": "double",
                "type": "tool",
                "tool": "add",
                "args": {"a": "{{ input.x }}", "b": "{{ input.x }}"},
            },
            edges=[{"from": "double", "to": "shout"}, {"from": "shout", "port": "result", "to": "end"}],
        )
    )
    run = await engine.start_run("edged", {"x": 4})
    done = await engine.wait_for_run(run.id, timeout=15)
    assert done.status == "completed", done.error
    assert done.output == {"last": 80, "first": 8}
    steps = await engine.list_steps(run.id)
    assert [s.node_id for s in steps] == ["double", "shout", "end"]


async def test_a_wait_that_is_the_last_node_waits_before_the_run_completes(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(
        flow(
            "trailing-wait",
            {"id": "hello", "type": "tool", "tool": "echo", "args": {"value": 1}},
            {"id": "nap", "type": "wait", "duration": "1s"},
        )
    )
    run = await engine.start_run("trailing-wait")
    await asyncio.sleep(0.4)
    mid = await engine.get_run(run.id)
    assert mid.status == "waiting", "a wait at the end must wait, not complete the run at once"
    done = await engine.wait_for_run(run.id, timeout=15)
    assert done.status == "completed"
    assert done.output == {"slept": 1.0}
    steps = await engine.list_steps(run.id)
    assert [s.node_id for s in steps][:2] == ["hello", "nap"]
    assert (done.completed_at - steps[1].finished_at).total_seconds() >= 1.0  # type: ignore[operator]


async def test_a_flat_dotted_payload_key_resolves_nested_in_templates(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow(
            "dotted",
            {"id": "end", "type": "finish", "output": "{{ payload.customer.email }}"},
            payload_format={"customer.email": "string"},
        )
    )
    run = await engine.start_run("dotted", {"customer.email": "ann@example.com"})
    done = await engine.wait_for_run(run.id, timeout=15)
    assert done.status == "completed", done.error
    assert done.output == "ann@example.com"


async def test_a_version_stored_before_graphs_still_runs(engine: Engine, worker: Worker) -> None:
    # The document exactly as the engine stored it before edges existed, with a node that
    # today's publish rules refuse (it cannot be reached): its runs must still load and run.
    document = {
        "name": "old-style",
        "retry": {"max_attempts": 3, "initial_delay": "PT1S", "backoff_factor": 2.0, "max_delay": "PT5M", "jitter": 0.2},
        "timeout": "PT5M",
        "kind": "structured",
        "nodes": [
            {"id": "a", "type": "tool", "tool": "add", "args": {"a": "{{ payload.x }}", "b": 1}, "next": "c"},
            {"id": "b", "type": "tool", "tool": "echo", "args": {"value": "never"}},
            {"id": "c", "type": "finish", "output": {"sum": "{{ steps.a }}"}},
        ],
    }  # fmt: skip
    await workflows.publish(
        engine.db.pool, DEFAULT_WORKSPACE, name="old-style", kind="structured", document=document,
        digest=content_hash(document), draft=None, enabled=None,
    )  # fmt: skip
    run = await engine.start_run("old-style", {"x": 2})
    done = await engine.wait_for_run(run.id, timeout=15)
    assert done.status == "completed", done.error
    assert done.output == {"sum": 3}
    assert [s.node_id for s in await engine.list_steps(run.id)] == ["a", "c"]
    # A run that was half way when the engine was updated: waiting before 'c', its first
    # step's output in run_steps, its state as the engine wrote it then.
    version = await engine.get_version("old-style")
    halfway = await engine.db.pool.fetchval(
        "INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, status_reason, input, state,"
        " step_seq, due_at, started_at) VALUES ($1, gen_random_uuid(), $2, $3, 'waiting', 'timer', $4,"
        " $5, 1, now(), now()) RETURNING id",
        DEFAULT_WORKSPACE, version.workflow_id, version.version, {"x": 5}, {"node": "c"},
    )  # fmt: skip
    await engine.db.pool.execute(
        "INSERT INTO run_steps (workspace_id, run_id, seq, attempt, node_id, kind, status, output,"
        " idempotency_key, fencing_token, started_at, finished_at)"
        " VALUES ($1, $2, 0, 1, 'a', 'tool', 'completed', '6', $3, 1, now(), now())",
        DEFAULT_WORKSPACE, halfway, f"{halfway}:0",
    )  # fmt: skip
    resumed = await engine.wait_for_run(halfway, timeout=15)
    assert resumed.status == "completed", resumed.error
    assert resumed.output == {"sum": 6}


class Shout(NodeSpec):
    """Upper-case ``text`` (a test-only kind, registered from outside the engine)."""

    title: ClassVar[str] = "Shout"
    result_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"loud": {"type": "string"}},
        "additionalProperties": False,
    }
    type: Literal["shout"] = "shout"
    text: str


class ShoutRunner(BaseRunner):
    kind = "shout"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        assert isinstance(node, Shout)
        text = await env.render(node.text, node.id, "text")
        return {"text": text}, NodeResult(output={"loud": str(text).upper()})


@pytest.fixture
def shout_kind() -> Iterator[None]:
    register_node_spec(Shout)
    register_runner(ShoutRunner())
    yield
    del NODE_SPECS["shout"], RUNNERS["shout"]


async def test_a_new_kind_registers_and_runs_without_touching_the_engine(
    engine: Engine, worker: Worker, shout_kind: None
) -> None:
    await engine.publish_workflow(
        flow(
            "shouting",
            {"id": "s", "type": "shout", "text": "hi {{ payload.name }}"},
            {"id": "end", "type": "finish", "output": "{{ input.loud }}!"},
        )
    )
    run = await engine.start_run("shouting", {"name": "ann"})
    done = await engine.wait_for_run(run.id, timeout=15)
    assert done.status == "completed", done.error
    assert done.output == "HI ANN!"
    with pytest.raises(Exception, match=r"input.quiet"):
        await engine.publish_workflow(
            flow(
                "shouting-2",
                {"id": "s", "type": "shout", "text": "x"},
                {"id": "e", "type": "finish", "output": "{{ input.quiet }}"},
            )
        )


async def test_node_kinds_are_listed_with_schemas_a_builder_can_use(engine: Engine, shout_kind: None) -> None:
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:
        listed = await client.get("/api/node-kinds")
    assert listed.status_code == 200, listed.text
    kinds = {k["kind"]: k for k in listed.json()["node_kinds"]}
    assert {"tool", "wait", "finish", "shout"} <= set(kinds)
    assert kinds["finish"]["ports"] == [] and kinds["tool"]["ports"] == ["result", "error"]
    assert kinds["shout"]["output_schemas"]["result"]["properties"] == {"loud": {"type": "string"}}
    assert kinds["wait"]["joins"] is False
    assert kinds["wait"]["pure"] is False and kinds["mapping"]["pure"] is True
    # The config schemas accept real nodes and refuse broken ones, as publishing does.
    good = {
        "tool": {
            "id": "t",
            "type": "tool",
            "tool": "echo",
            "args": {"value": "{{ input }}"},
            "timeout": "30s",
        },
        "wait": {"id": "w", "type": "wait", "duration": 90, "wake_on_event": True},
        "finish": {"id": "f", "type": "finish", "output": {"a": 1}, "retry": {"max_attempts": 2}},
        "shout": {"id": "s", "type": "shout", "text": "x"},
    }
    for kind, node in good.items():
        jsonschema.validate(node, kinds[kind]["config_schema"])
    bad = [
        ("tool", {"id": "t", "type": "tool"}),  # no tool
        ("tool", {"id": "t", "type": "tool", "tool": "x", "colour": "red"}),
        ("wait", {"id": "w", "type": "wait", "duration": True}),
        ("finish", {"id": "1 bad id", "type": "finish"}),
        ("shout", {"id": "s", "type": "tool", "text": "x"}),
    ]
    for kind, node in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(node, kinds[kind]["config_schema"])


ROUTED = flow(
    "routed",
    {
        "id": "route",
        "type": "condition",
        "branches": [
            {"port": "big", "when": {"path": "input.total", "op": "gte", "value": 1000}},
            {"port": "vip", "when": [{"path": "payload.tier", "op": "equals", "value": "gold"}]},
        ],
    },
    {"id": "big_order", "type": "tool", "tool": "echo", "args": {"value": "big {{ input.total }}"}},
    {"id": "vip_order", "type": "tool", "tool": "echo", "args": {"value": "vip {{ input.total }}"}},
    {"id": "small_order", "type": "tool", "tool": "echo", "args": {"value": "small {{ input.total }}"}},
    edges=[
        {"from": "route", "port": "big", "to": "big_order"},
        {"from": "route", "port": "vip", "to": "vip_order"},
        {"from": "route", "port": "default", "to": "small_order"},
    ],
)


@pytest.mark.parametrize(
    ("payload", "ran", "said"),
    [
        ({"total": 5000, "tier": "gold"}, "big_order", "big 5000"),  # the first branch that holds wins
        ({"total": 50, "tier": "gold"}, "vip_order", "vip 50"),
        ({"total": 50}, "small_order", "small 50"),
    ],
)
async def test_a_condition_fires_only_the_chosen_port(
    engine: Engine, worker: Worker, payload: dict[str, Any], ran: str, said: str
) -> None:
    await engine.publish_workflow(ROUTED)
    run = await engine.start_run("routed", payload)
    done = await engine.wait_for_run(run.id, timeout=15)
    assert done.status == "completed", done.error
    assert done.output == {"value": said}
    steps = await engine.list_steps(run.id)
    assert [s.node_id for s in steps] == ["route", ran]
    assert steps[0].output == payload  # a condition passes its input on
    assert steps[0].input["chosen"] == ran.split("_")[0].replace("small", "default")  # type: ignore[index]


async def test_a_failure_down_the_error_port_is_handled_and_survives_a_new_claim(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(
        flow(
            "handled",
            {
                "id": "call",
                "type": "tool",
                "tool": "always_fails",
                "args": {"code": "upstream_down"},
                "retry": {"max_attempts": 2, "initial_delay": "50ms"},
            },
            {"id": "fallback", "type": "tool", "tool": "echo", "args": {"value": "{{ input.code }}"}},
            # The wait sends the run away; the worker that takes it again reads the handled
            # failure's error back from the step rows.
            {"id": "nap", "type": "wait", "duration": "300ms"},
            {
                "id": "done",
                "type": "finish",
                "output": {"why": "{{ steps.call.code }}", "did": "{{ steps.fallback.value }}"},
            },
            {"id": "happy", "type": "finish", "output": "no"},
            edges=[
                {"from": "call", "to": "happy"},
                {"from": "call", "port": "error", "to": "fallback"},
                {"from": "fallback", "to": "nap"},
                {"from": "nap", "to": "done"},
            ],
        )
    )
    run = await engine.start_run("handled")
    done = await engine.wait_for_run(run.id, timeout=15)
    assert done.status == "completed", done.error
    assert done.output == {"why": "upstream_down", "did": "upstream_down"}
    assert done.error is None and done.fencing_token >= 2, "the run was claimed again after its wait"
    steps = await engine.list_steps(run.id)
    assert [(s.node_id, s.status, s.attempt) for s in steps][:3] == [
        ("call", "failed", 1),
        ("call", "failed", 2),
        ("fallback", "completed", 1),
    ]
    assert steps[1].error["code"] == "upstream_down" and steps[1].output["code"] == "upstream_down"  # type: ignore[index]
    assert steps[0].output is None, "only the attempt that was handed on carries the error as output"


async def test_without_an_error_edge_the_run_fails_as_before(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow(
            "unhandled", {"id": "call", "type": "tool", "tool": "always_fails", "args": {"retryable": False}}
        )
    )
    run = await engine.start_run("unhandled")
    done = await engine.wait_for_run(run.id, timeout=15)
    assert done.status == "failed" and done.error is not None and done.error["code"] == "upstream_down"
