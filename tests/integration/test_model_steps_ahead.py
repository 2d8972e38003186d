"""A model node's step written ahead of its run's row (``store.steps_ahead``), on the real
database: its row carries the call's usage and the same statement counts it on the workspace's
day; the run's totals and per-model ``costs`` follow with the row (the next full checkpoint,
the checkpoint after a claim that caught the run up, migration 0040's trigger, readers), and
every call is counted once on each.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from agentflow.runtime import pure_steps, worker
from agentflow.store import runs, steps_ahead
from agentflow.store.checkpoints import ModelUsage, StepWrite
from tests.conftest import make_settings
from tests.support.agents import running_worker

OWNER = "model-ahead-worker"
MODELS = ("scripted:gpt-4o-mini", "scripted:gpt-4o")


def llm_chain(name: str, nodes: int) -> dict[str, Any]:
    """``nodes`` llm nodes in a row, their models taking turns (two entries in ``costs``)."""
    ids = [f"ask{i}" for i in range(nodes)]
    built = [
        {
            "id": node_id,
            "type": "llm",
            "model": MODELS[i % 2],
            "prompt": "Go on from: {{ input.text | default('') }}",
        }
        for i, node_id in enumerate(ids)
    ]
    edges = [{"from": a, "to": b} for a, b in itertools.pairwise(ids)]
    return {"name": name, "kind": "structured", "nodes": built, "edges": edges}


@pytest.fixture
async def priced(database_url: str, tmp_path: Path) -> Any:
    """An engine whose scripted model has a price (USD on every call; the scripted provider
    answers as model ``scripted`` whatever the node names)."""
    prices = tmp_path / "prices.json"
    prices.write_text('{"scripted": {"input": 2.5, "output": 10, "cached_input": 1.25}}')
    engine = await Engine.connect(make_settings(database_url, pricing_file=prices), migrate_schema=False)
    try:
        yield engine
    finally:
        await engine.close()


async def _totals(engine: Engine, run_id: UUID) -> tuple[Any, ...]:
    """The run's totals and costs as its row holds them, and the same summed over its steps."""
    row = await engine.db.pool.fetchrow(
        "SELECT input_tokens, output_tokens, usd_cost, costs FROM runs WHERE id = $1", run_id
    )
    steps = await engine.db.pool.fetch(
        "SELECT model, sum(input_tokens) AS i, sum(output_tokens) AS o, sum(usd_cost) AS d, count(*) AS n"
        " FROM run_steps WHERE run_id = $1 AND model IS NOT NULL GROUP BY model ORDER BY model",
        run_id,
    )
    summed = [
        (s["model"], int(s["i"]), int(s["o"]), Decimal(s["d"]).quantize(Decimal("0.000001")), s["n"])
        for s in steps
    ]
    costs = [
        (c["key_type"], c["input_tokens"], c["output_tokens"], Decimal(str(c["usd_cost"])).quantize(Decimal("0.000001")),
         c["calls"]) for c in row["costs"]
    ]  # fmt: skip
    return (row["input_tokens"], row["output_tokens"], row["usd_cost"], costs), (
        sum(s[1] for s in summed),
        sum(s[2] for s in summed),
        sum((s[3] for s in summed), Decimal(0)),
        summed,
    )


async def _day(engine: Engine) -> tuple[int, int]:
    spend = await engine.governance.budget()
    return spend["model_calls"], spend["input_tokens"]


async def test_a_chain_of_model_nodes_goes_ahead_and_counts_every_call_once(
    priced: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = priced
    monkeypatch.setattr(pure_steps, "AHEAD_SECS", 60.0)  # a loaded machine must not end the stretch
    real = steps_ahead.write_ahead
    written: list[tuple[int, bool, Any]] = []

    async def watched(*args: Any) -> Any:
        done = await real(*args)
        written.append((args[6].seq, args[8] is not None, done.spend if done else None))
        return done

    monkeypatch.setattr(worker.steps_ahead, "write_ahead", watched)
    await engine.publish_workflow(llm_chain("model_ahead", 8))
    calls_before = (await _day(engine))[0]
    async with running_worker(engine, model=ScriptedProvider.from_replies([f"answer {i}" for i in range(8)])):
        run = await engine.start_run("model_ahead")
        done = await engine.wait_for_run(run.id, timeout=30)

    assert done.status.value == "completed", done.error
    # Every node but the last (it ends the run: in full) went ahead of the row with its usage,
    # and each write answered the day's spend (the next call's budget check needs no read).
    assert [(seq, used) for seq, used, _ in written] == [(seq, True) for seq in range(7)]
    assert all(spend is not None and spend[1] > 0 for _, _, spend in written)
    on_row, on_steps = await _totals(engine, run.id)
    assert on_steps[0] > 0 and on_steps[2] > 0 and len(on_steps[3]) == 2
    assert on_row[:3] == on_steps[:3], "the run's totals are its steps' usage, each call once"
    assert on_row[3] == [(m, i, o, d, n) for m, i, o, d, n in on_steps[3]], "costs per model, each call once"
    assert (await _day(engine))[0] - calls_before == 8, "the day counted each call once"


def _llm_step(seq: int, model: str) -> StepWrite:
    return StepWrite(seq, 0, f"ask{seq}", "llm", model, "completed", {}, {"text": f"a{seq}"}, None, 0.001)


async def _strand_with_model_steps_ahead(engine: Engine, name: str) -> tuple[UUID, UUID, int]:
    """A run of an llm chain whose worker wrote steps 0 and 1 ahead of its row (with their
    usage), then was lost: the row still says step 0 and no tokens."""
    await engine.publish_workflow(llm_chain(name, 4))
    run = await engine.start_run(name)
    [claimed] = await runs.claim(engine.db.pool, OWNER, 1, 30.0, 3)
    token = claimed.run.fencing_token
    assert await runs.begin(engine.db.pool, run.workspace_id, run.id, token, OWNER)
    for seq in (0, 1):
        usage = ModelUsage(MODELS[seq % 2], 100 + seq, 10 + seq, 0, 0.25 * (seq + 1))
        assert await steps_ahead.write_ahead(
            engine.db.pool, run.workspace_id, run.id, token, OWNER, 0, _llm_step(seq, MODELS[seq % 2]),
            {"node": f"ask{seq + 1}"}, usage,
        )  # fmt: skip
    row = await engine.db.pool.fetchrow("SELECT step_seq, input_tokens FROM runs WHERE id = $1", run.id)
    assert (row["step_seq"], row["input_tokens"]) == (0, 0)
    return run.workspace_id, run.id, token


async def test_readers_see_the_usage_of_model_steps_written_ahead(engine: Engine) -> None:
    _, run_id, _ = await _strand_with_model_steps_ahead(engine, "model_ahead_read")

    read = await engine.get_run(run_id)

    assert read.step_seq == 2 and (read.input_tokens, read.output_tokens) == (201, 21)
    assert read.usd_cost == Decimal("0.75")
    assert read.costs == [
        {"key_type": MODELS[1], "input_tokens": 101, "output_tokens": 11, "cached_input_tokens": 0,
         "usd_cost": 0.5, "calls": 1},
        {"key_type": MODELS[0], "input_tokens": 100, "output_tokens": 10, "cached_input_tokens": 0,
         "usd_cost": 0.25, "calls": 1},
    ]  # fmt: skip
    assert (await _day(engine)) == (2, 201), "each write counted its call on the day"


@pytest.mark.parametrize("catch_up", [True, False])
async def test_a_run_rescued_with_model_steps_ahead_counts_them_on_its_totals_once(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, catch_up: bool
) -> None:
    _, run_id, _ = await _strand_with_model_steps_ahead(engine, "model_ahead_rescued")
    await engine.db.pool.execute(
        "UPDATE runs SET lease_expires_at = now() - interval '1 s', due_at = now() - interval '1 s' WHERE id = $1",
        run_id,
    )
    if not catch_up:  # negative control: the rescuing worker's first checkpoint skips them
        real = pure_steps.PureSteps.fence

        def forgetful(self: pure_steps.PureSteps, outcome: Any) -> Any:
            fenced = real(self, outcome)
            return replace(fenced, run=replace(fenced.run, ahead_usage=False))

        monkeypatch.setattr(pure_steps.PureSteps, "fence", forgetful)
    async with running_worker(engine, model=ScriptedProvider.from_replies(["c", "d"])):
        done = await engine.wait_for_run(run_id, timeout=30)

    assert done.status.value == "completed", done.error
    assert [s.seq for s in await engine.list_steps(run_id)] == [0, 1, 2, 3], "no step ran again"
    on_row, on_steps = await _totals(engine, run_id)
    if catch_up:
        assert on_row[:3] == on_steps[:3] and on_row[3] == on_steps[3]
        assert [c[4] for c in on_row[3]] == [2, 2], "two calls of each model"
    else:
        assert on_row[0] == on_steps[0] - 201, "without the catch-up the stranded calls are lost"
    assert (await _day(engine))[0] == 4, "the day counted each call once, the stranded ones too"


@pytest.mark.parametrize("trigger", [True, False])
async def test_a_run_canceled_with_model_steps_ahead_has_their_usage_on_its_totals(
    engine: Engine, trigger: bool
) -> None:
    ws, run_id, token = await _strand_with_model_steps_ahead(engine, "model_ahead_canceled")
    if not trigger:  # negative control: without the trigger the row keeps lagging
        await engine.db.pool.execute("ALTER TABLE runs DISABLE TRIGGER run_steps_caught_up")
    try:
        await engine.db.pool.execute("UPDATE runs SET cancel_requested = true WHERE id = $1", run_id)
        assert await runs.finish_cancel(engine.db.pool, ws, run_id, token, OWNER)
    finally:
        await engine.db.pool.execute("ALTER TABLE runs ENABLE TRIGGER run_steps_caught_up")

    row = await engine.db.pool.fetchrow(
        "SELECT status, step_seq, input_tokens, usd_cost, costs FROM runs WHERE id = $1", run_id
    )
    assert row["status"] == "canceled"
    if trigger:
        assert (row["step_seq"], row["input_tokens"], row["usd_cost"]) == (2, 201, Decimal("0.75"))
        assert [(c["key_type"], c["calls"]) for c in row["costs"]] == [(MODELS[1], 1), (MODELS[0], 1)]
    else:
        assert (row["step_seq"], row["input_tokens"], row["costs"]) == (0, 0, [])


async def test_the_database_and_readers_merge_costs_alike(engine: Engine) -> None:
    costs = [{"key_type": "b", "input_tokens": 1, "output_tokens": 2, "cached_input_tokens": 3,
              "usd_cost": 0.1, "calls": 1}]  # fmt: skip
    added = [
        {"key_type": "a", "input_tokens": 5, "output_tokens": 5, "cached_input_tokens": 0, "usd_cost": 0.0000004,
         "calls": 1},
        {"key_type": "b", "input_tokens": 10, "output_tokens": 20, "cached_input_tokens": 0, "usd_cost": 0.2,
         "calls": 2},
    ]  # fmt: skip
    merged = await engine.db.pool.fetchval(
        "SELECT agentflow_merged_costs($1::jsonb, $2::jsonb)", costs, added
    )
    assert steps_ahead._merged(costs, added) == merged == [
        {"key_type": "a", "input_tokens": 5, "output_tokens": 5, "cached_input_tokens": 0, "usd_cost": 0.0,
         "calls": 1},
        {"key_type": "b", "input_tokens": 11, "output_tokens": 22, "cached_input_tokens": 3, "usd_cost": 0.3,
         "calls": 3},
    ]  # fmt: skip
