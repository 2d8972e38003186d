"""A worker killed (-9) while model nodes' steps it wrote ahead of its run's row are on the
workspace's day but not yet on the run's totals: the rescuing worker's first checkpoint adds
them, so every model call is counted once on the run, its per-model costs and the day.

A model node's step that only moves its run on is written as its row alone with its usage,
which the same statement adds to the workspace's day (``store.steps_ahead``); the run's totals
follow with the row. The starting process (a real subprocess with its own worker and the
scripted model) runs a chain whose fifth node kills it: by then four model calls are on their
rows and the day, and the row still says step 0 with no tokens. Once the lease expires a worker
of this process takes the run. The negative control's rescuing worker does not add the usage
of the steps it found ahead: the four stranded calls are then missing from the run's totals.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import replace
from typing import Any
from uuid import UUID

import pytest

import agentflow
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from agentflow.runtime import pure_steps
from tests.conftest import make_settings
from tests.support.agents import running_worker

pytestmark = pytest.mark.fault

LEASE_TTL = 2.0
SWITCH = "model_ahead_kill_switch"
MODELS = ("scripted:small", "scripted:large")
NODES = ["ask0", "ask1", "ask2", "ask3", "kill", "ask5", "ask6"]
FLOW = {
    "name": "model_ahead_kill",
    "kind": "structured",
    "nodes": [
        {"id": n, "type": "tool", "tool": SWITCH}
        if n == "kill"
        else {"id": n, "type": "llm", "model": MODELS[int(n[-1]) % 2], "prompt": "Go on from {{ input }}"}
        for n in NODES
    ],
}
STARTER = f"""
import asyncio, os, signal, sys
import agentflow
import agentflow.runtime.pure_steps as pure_steps
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from agentflow.settings import Settings

pure_steps.AHEAD_SECS = 60.0  # a loaded machine must not end the stretch before the kill

@agentflow.tool(name={SWITCH!r})
async def switch() -> None:
    os.kill(os.getpid(), signal.SIGKILL)

async def main() -> None:
    settings = Settings(database_url=sys.argv[1], lease_ttl=float(sys.argv[2]), pool_min_size=1, pool_max_size=4)
    engine = await Engine.connect(settings, migrate_schema=False)
    model = ScriptedProvider.from_rules([], fallback="an answer of a few words")
    worker = engine.worker(concurrency=1, dispatch=False, model=model)
    task = asyncio.create_task(worker.run())
    run = await engine.start_run("model_ahead_kill")
    print(run.id, flush=True)
    await task  # the kill switch kills this process

asyncio.run(main())
"""
SWITCHED: list[int] = []


@agentflow.tool(name=SWITCH)
async def harmless_switch() -> None:
    """The rescuing worker's kill switch: it only counts."""
    SWITCHED.append(1)


async def day_calls(engine: Engine) -> int:
    return int((await engine.governance.budget())["model_calls"])


async def strand(engine: Engine, database_url: str) -> UUID:
    """A run whose worker died at its fifth node, four model calls written ahead of its row."""
    starter = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        STARTER,
        database_url,
        str(LEASE_TTL),
        stdout=asyncio.subprocess.PIPE,
        env=os.environ,
    )
    out, _ = await asyncio.wait_for(starter.communicate(), 60)
    assert starter.returncode == -9, out  # killed by its kill switch
    run_id = UUID(out.decode().split()[0])
    row = await engine.db.pool.fetchrow(
        "SELECT status, step_seq, input_tokens FROM runs WHERE id = $1", run_id
    )
    assert row is not None and row["status"] == "in_progress"
    assert (row["step_seq"], row["input_tokens"]) == (0, 0), "the row keeps what the claim found"
    steps = await engine.list_steps(run_id)
    assert [(s.seq, s.input_tokens > 0) for s in steps] == [(seq, True) for seq in range(4)]
    assert await day_calls(engine) == 4, "each call written ahead is on the day"
    return run_id


async def rescued_totals(engine: Engine, run_id: UUID) -> tuple[Any, tuple[int, int], list[Any], list[Any]]:
    """Let a worker of this process take the run: its end, its totals and those summed over its
    steps, its costs and its steps' calls per model."""
    async with running_worker(engine, dispatch=False, model=ScriptedProvider.from_rules([], fallback="ok")):
        done = await engine.wait_for_run(run_id, timeout=60)
    row = await engine.db.pool.fetchrow(
        "SELECT input_tokens, output_tokens, costs FROM runs WHERE id = $1", run_id
    )
    per_model = await engine.db.pool.fetch(
        "SELECT model, sum(input_tokens) AS i, sum(output_tokens) AS o, count(*) AS n, array_agg(seq ORDER BY seq) AS seqs"
        " FROM run_steps WHERE run_id = $1 AND model IS NOT NULL GROUP BY model ORDER BY model",
        run_id,
    )
    summed = (sum(int(m["i"]) for m in per_model), sum(int(m["o"]) for m in per_model))
    steps = [(m["model"], int(m["i"]), int(m["o"]), m["n"], list(m["seqs"])) for m in per_model]
    costs = [(c["key_type"], c["input_tokens"], c["output_tokens"], c["calls"]) for c in row["costs"]]
    return done, (row["input_tokens"], row["output_tokens"]), [summed, steps], costs


async def test_model_calls_written_ahead_are_counted_once_after_a_kill(database_url: str) -> None:
    engine = await Engine.connect(make_settings(database_url, lease_ttl=LEASE_TTL), migrate_schema=False)
    SWITCHED.clear()
    try:
        await engine.publish_workflow(FLOW)
        run_id = await strand(engine, database_url)
        done, totals, (summed, steps), costs = await rescued_totals(engine, run_id)
        assert done.status.value == "completed", done.error
        assert [seqs for *_, seqs in steps] == [[1, 3, 5], [0, 2, 6]], "each model node recorded once"
        assert totals == summed, "the run's totals hold every call once, the stranded ones too"
        assert costs == [(m, i, o, n) for m, i, o, n, _ in steps], "so do its costs, per model"
        assert await day_calls(engine) == 6, "and the day"
        assert SWITCHED == [1], "only the step the kill cut off ran again"
    finally:
        await engine.close()


async def test_negative_control_a_rescue_that_skips_the_usage_ahead_loses_the_stranded_calls(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = pure_steps.PureSteps.fence

    def forgetful(self: pure_steps.PureSteps, outcome: Any) -> Any:
        fenced = real(self, outcome)
        return replace(fenced, run=replace(fenced.run, ahead_usage=False))

    engine = await Engine.connect(make_settings(database_url, lease_ttl=LEASE_TTL), migrate_schema=False)
    try:
        await engine.publish_workflow(FLOW)
        run_id = await strand(engine, database_url)
        monkeypatch.setattr(pure_steps.PureSteps, "fence", forgetful)
        done, totals, (summed, _), _ = await rescued_totals(engine, run_id)
        assert done.status.value == "completed", done.error
        stranded = await engine.db.pool.fetchval(
            "SELECT sum(input_tokens) FROM run_steps WHERE run_id = $1 AND seq < 4", run_id
        )
        # (so are the calls the rescuer wrote ahead: this fence skips every catch-up)
        assert stranded > 0 and totals[0] <= summed[0] - stranded, "the four stranded calls are missing"
        assert await day_calls(engine) == 6, "the day has them: they were counted as written"
    finally:
        await engine.close()
