"""The ``run_code`` node end to end: a real worker runs each step's code in its sandbox and
checkpoints what ``main`` returned, or the error, which the node's ``error`` port can take.

The engine's operator switched code steps on (``run_code="on"``); an engine that did not
refuses to publish them, and a worker that did not leaves their runs to workers that did.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.core.errors import ConfigError
from agentflow.core.records import RunRecord, StepRecord
from agentflow.engine import Engine
from agentflow.integrations.sandbox import CodeSandbox
from agentflow.runtime.worker import Worker
from agentflow.store import runs
from tests.conftest import make_settings
from tests.support.agents import running_worker
from tests.support.http_server import serve

SUM = """
def main(input):
    total = sum(item["price"] * item["qty"] for item in input["items"])
    print("summing", len(input["items"]), "items")  # goes to the log, not the result
    return {"total": total, "count": len(input["items"])}
"""


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[Engine]:
    """The engine (and so the ``worker`` fixture's worker) with code steps switched on."""
    eng = await Engine.connect(make_settings(database_url, run_code="on"), migrate_schema=False)
    yield eng
    await eng.close()


def flow(name: str, *nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "nodes": list(nodes), **extra}


def code(node_id: str, source: str, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "type": "run_code", "code": source, **extra}


async def finished(engine: Engine, config: dict[str, Any], payload: Any = None) -> RunRecord:
    await engine.publish_workflow(config)
    run = await engine.start_run(config["name"], payload)
    done = await engine.wait_for_run(run.id, timeout=60)
    assert done.status.is_terminal, (done.status, done.status_reason, done.error)
    return done


async def steps_of(engine: Engine, run_id: UUID, node_id: str) -> list[StepRecord]:
    return [s for s in await engine.list_steps(run_id) if s.node_id == node_id]


async def test_python_code_gets_its_input_as_json_and_its_result_is_the_nodes_output(
    engine: Engine, worker: Worker
) -> None:
    config = flow(
        "sum-order",
        code("sum", SUM, input={"items": "{{ payload.lines }}"}),
        {"id": "done", "type": "finish", "output": "total {{ input.total }} of {{ input.count }}"},
    )
    payload = {"lines": [{"price": 2.5, "qty": 4}, {"price": 1, "qty": 3}]}
    done = await finished(engine, config, payload)
    assert done.status == "completed", done.error
    assert done.output == "total 13.0 of 2"
    [step] = await steps_of(engine, done.id, "sum")
    assert (step.kind, step.name, step.status) == ("run_code", "python", "completed")
    assert step.output == {"total": 13.0, "count": 2}
    assert step.input["input"] == {"items": payload["lines"]} and step.input["language"] == "python"
    assert step.input["sandbox"] in ("namespaces", "basic")
    assert step.input["cgroup"] is (os.geteuid() == 0 and sys.platform == "linux"), step.input


async def test_by_default_the_code_gets_the_previous_nodes_output(engine: Engine, worker: Worker) -> None:
    config = flow(
        "chain",
        {"id": "shape", "type": "mapping", "output": {"words": "{{ payload.text.split() }}"}},
        code("count", "def main(input):\n    return {w: len(w) for w in input['words']}"),
        {"id": "done", "type": "finish", "output": "{{ input }}"},
    )
    done = await finished(engine, config, {"text": "durable agent flows"})
    assert done.output == {"durable": 7, "agent": 5, "flows": 5}, done.error


async def test_an_exception_goes_down_the_error_port_with_the_end_of_the_log(
    engine: Engine, worker: Worker
) -> None:
    failing = (
        "def main(input):\n    print('checking', input)\n    raise ValueError('no price for ' + input['sku'])"
    )
    config = flow(
        "price-check",
        code("check", failing, input={"sku": "{{ payload.sku }}"}, retry={"max_attempts": 3}),
        {"id": "ok", "type": "finish", "output": "{{ input }}"},
        {"id": "handled", "type": "finish",
         "output": {"code": "{{ input.code }}", "message": "{{ input.message }}", "log": "{{ input.details.log }}"}},
        edges=[{"from": "check", "to": "ok"}, {"from": "check", "port": "error", "to": "handled"}],
    )  # fmt: skip
    done = await finished(engine, config, {"sku": "A-7"})
    assert done.status == "completed", done.error
    assert done.output["code"] == "code_failed"
    assert done.output["message"].endswith("ValueError: no price for A-7")
    assert "checking {'sku': 'A-7'}" in done.output["log"] and "Traceback" in done.output["log"]
    [step] = await steps_of(engine, done.id, "check")
    assert step.status == "failed" and step.attempt == 1, "the same code on the same input is not retried"


@pytest.mark.parametrize(
    ("source", "limits", "error_code", "words"),
    [
        ("def main(input):\n    while True:\n        pass", {"timeout": "1s"}, "code_timeout", "within 1s"),
        (
            "def main(input):\n    hog = []\n    while True:\n        hog.append(bytearray(10**7))",
            {"memory_mb": 64},
            "code_memory_exceeded",
            "64 MiB",
        ),
        (
            "def main(input):\n    return 'x' * 5000",
            {"max_output_bytes": 1000},
            "code_output_too_large",
            "over max_output_bytes (1,000 bytes",
        ),
        ("def main(input):\n    return {1, 2}", {}, "code_result_invalid", "set, which is not JSON"),
    ],
    ids=["timeout", "memory", "output", "not-json"],
)
async def test_a_limit_passed_fails_the_step_with_its_code_and_fix(
    engine: Engine, worker: Worker, source: str, limits: dict[str, Any], error_code: str, words: str
) -> None:
    done = await finished(engine, flow(f"limit-{error_code}", code("c", source, **limits)))
    assert done.status == "failed" and done.error is not None
    assert done.error["code"] == error_code, done.error
    assert words in done.error["message"], done.error["message"]
    assert done.error["solution"] and done.error["details"]["node"] == "c"


async def test_javascript_runs_where_node_is_installed_and_fails_clearly_where_not(
    engine: Engine, worker: Worker
) -> None:
    source = "async function main(input) {\n  console.log('doubling');\n  return input.map((n) => n * 2);\n}"
    done = await finished(engine, flow("js-double", code("double", source, language="javascript")), [1, 2, 3])
    if shutil.which("node"):
        assert done.status == "completed", done.error
        assert done.output == [2, 4, 6]
        [step] = await steps_of(engine, done.id, "double")
        assert step.name == "javascript"
    else:
        assert done.error is not None and done.error["code"] == "code_language_unavailable"
        assert "Node.js" in done.error["solution"]


async def test_a_worker_without_node_fails_javascript_with_code_language_unavailable(
    database_url: str,
) -> None:
    settings = make_settings(database_url, run_code="on", run_code_node="/nonexistent/bin/node")
    async with Engine.open(settings, migrate_schema=False) as engine:
        worker = engine.worker(concurrency=2)
        task = asyncio.create_task(worker.run())
        try:
            config = flow(
                "js-nowhere", code("c", "function main(input) { return 1; }", language="javascript")
            )
            done = await finished(engine, config)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)
    assert done.error is not None and done.error["code"] == "code_language_unavailable", done.error
    assert "no javascript interpreter" in done.error["message"]
    assert "AGENTFLOW_RUN_CODE_NODE" in done.error["solution"]


async def test_isolated_mode_runs_only_in_the_namespace_sandbox(database_url: str) -> None:
    tier, _ = await CodeSandbox().tier()
    async with Engine.open(make_settings(database_url, run_code="isolated"), migrate_schema=False) as engine:
        worker = engine.worker(concurrency=2)
        task = asyncio.create_task(worker.run())
        try:
            done = await finished(engine, flow("strict", code("c", "def main(input):\n    return 42")))
            steps = await steps_of(engine, done.id, "c")
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)
    if tier == "namespaces":
        assert done.output == 42, done.error
        assert steps[0].input["sandbox"] == "namespaces"
    else:  # this machine cannot build it: the step says so rather than run with less
        assert done.error is not None and done.error["code"] == "code_sandbox_unavailable", done.error


async def test_an_engine_with_code_steps_off_refuses_to_publish_them(database_url: str) -> None:
    async with Engine.open(make_settings(database_url), migrate_schema=False) as engine:
        config = flow(
            "refused",
            {"id": "shape", "type": "mapping", "output": {"n": 1}},
            code("c", "def main(input):\n    return 1"),
        )
        with pytest.raises(ConfigError) as info:
            await engine.publish_workflow(config)
        assert info.value.info.code == "run_code_disabled"
        assert info.value.info.details["errors"][0]["path"] == "nodes[1].type"
        assert "AGENTFLOW_RUN_CODE=on" in (info.value.info.solution or "")
        async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:
            answered = await client.post("/api/ai/workflows", json=config)
        assert answered.status_code == 422, answered.text
        assert answered.json()["error"]["code"] == "run_code_disabled"
        assert await engine.list_workflows() == []


async def test_workers_with_code_steps_off_leave_runs_with_code_to_workers_that_run_it(
    engine: Engine, database_url: str
) -> None:
    await engine.publish_workflow(flow("with-code", code("c", "def main(input):\n    return 7")))
    await engine.publish_workflow(flow("plain", {"id": "shape", "type": "mapping", "output": {"n": 1}}))
    coded, plain = await engine.start_run("with-code", None), await engine.start_run("plain", None)
    async with Engine.open(make_settings(database_url, run_code="off"), migrate_schema=False) as off:
        worker = off.worker(concurrency=2)
        task = asyncio.create_task(worker.run())
        try:
            assert (await off.wait_for_run(plain.id, timeout=30)).status == "completed"
            await asyncio.sleep(1.0)  # a few claim rounds
            left = await engine.get_run(coded.id)
            assert (left.status, left.started_at) == ("created", None), "never claimed by it"
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)
    # The claim's filter is what kept it: a worker that runs code takes it (negative control).
    (taken,) = await runs.claim(engine.db.pool, "code-worker", 10, 30.0, 3, code=True)
    assert taken.run.id == coded.id
    await runs.release(engine.db.pool, coded.workspace_id, coded.id, taken.run.fencing_token, "code-worker")
    async with running_worker(engine):
        done = await engine.wait_for_run(coded.id, timeout=30)
    assert (done.status, done.output) == ("completed", 7), done.error
