"""``agentflow runs``: ``start --wait`` reports the run's outcome in its exit code, ``list`` shows
the workflow and whole ids, and ``show`` (and the other commands) accept a unique id prefix."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator

import pytest

import tests.support.tools  # noqa: F401  (the in-process worker needs the tools)
from agentflow.engine import Engine
from agentflow.runtime.worker import Worker
from tests.support.cli import cli_env, run_cli

FAILING = {
    "name": "breaks",
    "kind": "structured",
    "retry": {"max_attempts": 1},
    "nodes": [{"id": "boom", "type": "tool", "tool": "always_fails", "args": {"retryable": False}}],
}
WORKING = {"name": "works", "kind": "structured", "nodes": [{"id": "e", "type": "tool", "tool": "echo"}]}


@pytest.fixture
async def worker(engine: Engine) -> AsyncIterator[Worker]:
    w = engine.worker(concurrency=2)
    task = asyncio.create_task(w.run())
    yield w
    w.stop()
    await task


@pytest.mark.usefixtures("worker")
async def test_start_wait_exits_non_zero_when_the_run_fails(engine: Engine, database_url: str) -> None:
    await engine.publish_workflow(FAILING)
    await engine.publish_workflow(WORKING)
    env = cli_env(database_url)
    failed = await asyncio.to_thread(run_cli, ["runs", "start", "breaks", "--wait"], env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "failed" in failed.stdout + failed.stderr and "upstream_down" in failed.stdout + failed.stderr
    ok = await asyncio.to_thread(run_cli, ["runs", "start", "works", "--wait"], env)
    assert ok.returncode == 0, ok.stdout + ok.stderr


async def test_start_wait_gives_up_after_its_timeout_with_a_failure(
    engine: Engine, database_url: str
) -> None:
    await engine.publish_workflow(WORKING)  # no worker: the run never ends
    result = await asyncio.to_thread(
        run_cli, ["runs", "start", "works", "--wait", "--timeout", "0.5"], cli_env(database_url)
    )
    assert result.returncode == 1
    assert "did not end within 0.5 s" in result.stderr


async def test_list_shows_the_workflow_and_whole_ids(engine: Engine, database_url: str) -> None:
    await engine.publish_workflow(WORKING)
    await engine.publish_workflow(FAILING)
    first = await engine.start_run("works")
    second = await engine.start_run("breaks")
    env = cli_env(database_url, COLUMNS="80")  # a common terminal width: nothing may be cut
    listed = await asyncio.to_thread(run_cli, ["runs", "list"], env)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[1]: line for line in listed.stdout.splitlines() if re.search(r"[0-9a-f]{8}-", line)}
    assert str(first.id) in rows["works"] and str(second.id) in rows["breaks"], listed.stdout


async def test_show_cancel_accept_a_unique_prefix_and_refuse_an_ambiguous_one(
    engine: Engine, database_url: str
) -> None:
    await engine.publish_workflow(WORKING)
    run = await engine.start_run("works")
    env = cli_env(database_url)
    shown = await asyncio.to_thread(run_cli, ["runs", "show", str(run.id)[:8]], env)
    assert shown.returncode == 0, shown.stderr
    assert f"run {run.id}" in shown.stdout and "works" in shown.stdout

    # Two runs whose ids share a prefix (written directly: random ids rarely collide).
    twins = [uuid.UUID(f"abcdef12-0000-4000-8000-00000000000{n}") for n in (1, 2)]
    for twin in twins:
        await engine.db.pool.execute(
            "INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, due_at)"
            " SELECT workspace_id, $1, workflow_id, workflow_version, now() FROM runs WHERE id = $2",
            twin,
            run.id,
        )
    ambiguous = await asyncio.to_thread(run_cli, ["runs", "show", "abcdef12"], env)
    assert ambiguous.returncode == 1
    assert "run_id_ambiguous" in ambiguous.stderr and all(str(t) in ambiguous.stderr for t in twins)
    assert "Traceback" not in ambiguous.stderr
    canceled = await asyncio.to_thread(
        run_cli, ["runs", "cancel", "abcdef12-0000-4000-8000-000000000002"], env
    )
    assert canceled.returncode == 0 and "canceled" in canceled.stdout, canceled.stderr
    by_prefix = await asyncio.to_thread(
        run_cli, ["runs", "cancel", "ABCDEF12-0000-4000-8000-0000000000"], env
    )
    assert by_prefix.returncode == 1 and "run_id_ambiguous" in by_prefix.stderr  # upper case is fine too

    missing = await asyncio.to_thread(run_cli, ["runs", "show", "ffffffff"], env)
    assert missing.returncode == 1 and "run_not_found" in missing.stderr
    short = await asyncio.to_thread(run_cli, ["runs", "show", "ab"], env)
    assert short.returncode == 1 and "run_id_invalid" in short.stderr and "at least 4" in short.stderr
    nonsense = await asyncio.to_thread(run_cli, ["runs", "show", "not-a-run"], env)
    assert nonsense.returncode == 1 and "run_not_found" in nonsense.stderr


LOOPING = {
    "name": "loops",
    "kind": "structured",
    "nodes": [
        {"id": "each", "type": "for_each", "items": "{{ payload.rows }}"},
        {"id": "item", "type": "tool", "tool": "echo", "args": {"value": "{{ input }}"}},
    ],
    "edges": [{"from": "each", "port": "iteration", "to": "item"}],
}


@pytest.mark.usefixtures("worker")
async def test_list_shows_loop_items_only_under_their_run(engine: Engine, database_url: str) -> None:
    await engine.publish_workflow(LOOPING)
    run = await engine.start_run("loops", {"rows": [1, 2, 3]})
    assert (await engine.wait_for_run(run.id, timeout=30)).status == "completed"
    items = {str(r.id) for r in await engine.list_runs(workflow="loops", loop_of=run.id)}
    env = cli_env(database_url, COLUMNS="200")
    top = await asyncio.to_thread(run_cli, ["runs", "list", "-w", "loops"], env)
    under = await asyncio.to_thread(run_cli, ["runs", "list", "--loop-of", str(run.id)[:8]], env)
    assert top.returncode == 0 and under.returncode == 0, top.stderr + under.stderr
    assert str(run.id) in top.stdout and not any(i in top.stdout for i in items), top.stdout
    assert len(items) == 3 and all(i in under.stdout for i in items), under.stdout


async def test_start_with_an_idempotency_key_starts_one_run(engine: Engine, database_url: str) -> None:
    await engine.publish_workflow(WORKING)
    env = cli_env(database_url, COLUMNS="200")
    command = ["runs", "start", "works", "--payload", '{"n": 1}', "--idempotency-key", "nightly-2026-11-25"]
    first = await asyncio.to_thread(run_cli, command, env)
    again = await asyncio.to_thread(run_cli, command, env)
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    [run] = await engine.list_runs(workflow="works")
    assert f"started run {run.id}" in first.stdout
    assert f"run {run.id} was started earlier with this key" in again.stdout
    clash = await asyncio.to_thread(run_cli, [*command[:3], "--payload", '{"n": 2}', *command[5:]], env)
    assert clash.returncode != 0 and "idempotency_key_reused" in clash.stderr + clash.stdout


async def test_list_takes_every_run_search_filter_and_refuses_a_misspelt_one(
    engine: Engine, database_url: str
) -> None:
    await engine.publish_workflow(WORKING)
    first = await engine.start_run("works")
    second = await engine.start_run("works")
    env = cli_env(database_url, COLUMNS="200")
    one = await asyncio.to_thread(run_cli, ["runs", "list", "--where", f"run_id={first.id}"], env)
    assert one.returncode == 0, one.stdout + one.stderr
    assert str(first.id) in one.stdout and str(second.id) not in one.stdout
    none = await asyncio.to_thread(run_cli, ["runs", "list", "-w", "works", "--model", "openai:gpt-4o"], env)
    assert none.returncode == 0 and str(first.id) not in none.stdout  # neither called a model
    both = await asyncio.to_thread(
        run_cli, ["runs", "list", "--where", "created[gte]=2000-01-01T00:00:00Z"], env
    )
    assert str(first.id) in both.stdout and str(second.id) in both.stdout
    for bad, code in (("colour=red", "query_parameter_unknown"), ("created[gte]=soon", "query_parameter_invalid"),
                      ("nothing", "query_parameter_invalid")):  # fmt: skip
        refused = await asyncio.to_thread(run_cli, ["runs", "list", "--where", bad], env)
        assert refused.returncode == 2 and code in refused.stdout, (bad, refused.stdout)


@pytest.mark.usefixtures("worker")
async def test_rerun_starts_a_new_run_from_a_step_and_says_why_it_cannot(
    engine: Engine, database_url: str
) -> None:
    two = {
        "name": "two",
        "kind": "structured",
        "nodes": [{"id": "a", "type": "tool", "tool": "echo"}, {"id": "b", "type": "tool", "tool": "echo"}],
    }
    await engine.publish_workflow(two)
    old = await engine.wait_for_run((await engine.start_run("two")).id, timeout=30)
    env = cli_env(database_url)
    made = await asyncio.to_thread(run_cli, ["runs", "rerun", str(old.id)[:8], "--from-step", "1"], env)
    assert made.returncode == 0, made.stdout + made.stderr
    new_id = re.search(r"run ([0-9a-f-]{36}): a rerun", made.stdout)
    assert new_id is not None, made.stdout
    assert (await engine.get_run(new_id.group(1))).rerun_of == {"run_id": str(old.id), "step": 1}
    missing = await asyncio.to_thread(run_cli, ["runs", "rerun", str(old.id), "--from-step", "7"], env)
    assert missing.returncode != 0 and "step_not_found" in missing.stdout + missing.stderr
