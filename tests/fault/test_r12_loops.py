"""R12: for_each over 1,000 items, concurrency 10, while workers are SIGKILLed.

R1's chaos (two worker processes, each generation armed with a failpoint, the test's own
random kills) runs a workflow whose loop fans 1,000 items out as child runs; each item
writes a task row inside its checkpoint and computes a value. Then an independent count
checks: the run completed; each item ran exactly once (one completed child per index, each
of its body's nodes checkpointed once, one task row); the join holds all 1,000 results in
order.

The negative control runs the same chaos against workers whose checkpoint writes the step
and the run's new frontier in two statements: a kill between them makes the parent start its
loop again, and the count must find items that ran twice. The window is one checkpoint per
parent (the one that inserts its items), too rare for random kills to hit on every machine,
so the first worker to commit such a checkpoint kills itself inside the window.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from agentflow.engine import Engine
from tests.fault.checks import print_verdict
from tests.fault.test_r1_kills import chaos_report, run_chaos
from tests.support.recording_server import RecordingServer

pytestmark = pytest.mark.fault

ITEMS = 1000

# The checkpoint that inserts a loop's items writes them with the run's old state, and the
# first worker to get there dies before a second statement would write the new one.
KILL_INSIDE_THE_WINDOW = """
import os, signal
from dataclasses import replace
import agentflow.store.runs as runs
_real = runs.checkpoint
async def _two_statements(sender, ws, run_id, token, owner, run, step, effects=runs.Effects(), prior=()):
    if not effects.children:
        return await _real(sender, ws, run_id, token, owner, run, step, effects, prior)
    pool = getattr(sender, "pool", sender)  # the worker's CommitGroup, or a pool
    old = await pool.fetchval("SELECT state FROM runs WHERE id = $1", run_id)
    done = await _real(sender, ws, run_id, token, owner, replace(run, state=old), step, effects, prior)
    if done is not None:
        try:
            os.close(os.open({marker!r}, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            os.kill(os.getpid(), signal.SIGKILL)
        except FileExistsError:
            pass
        await pool.execute("UPDATE runs SET state = $2 WHERE id = $1 AND fencing_token = $3", run_id, run.state, token)
    return done
runs.checkpoint = _two_statements
"""


def loop_flow(name: str, items: int) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "structured",
        "nodes": [
            {"id": "each", "type": "for_each", "items": f"{{{{ range({items}) | list }}}}", "concurrency": 10,
             "max_items": items},
            {"id": "task", "type": "tool", "tool": "checkpointed_task", "args": {"title": "item {{ input }}"}},
            {"id": "value", "type": "tool", "tool": "add", "args": {"a": "{{ steps.task.task[5:] | int }}", "b": 1}},
            {"id": "joined", "type": "finish", "output": "{{ input }}"},
        ],
        "edges": [
            {"from": "each", "port": "iteration", "to": "task"},
            {"from": "task", "to": "value"},
            {"from": "each", "port": "done", "to": "joined"},
        ],
    }  # fmt: skip


async def count(pool: asyncpg.Pool, parents: list[UUID], items: int) -> dict[str, Any]:
    """Per parent run: its status, its join, and every item's children, steps and task rows."""
    verdict: dict[str, Any] = {"parents": len(parents), "lost": {}, "duplicated": {}}
    lost = verdict["lost"]
    dup = verdict["duplicated"]
    for key in ("runs_not_completed", "items_never_completed", "join_wrong"):
        lost[key] = 0
    for key in ("items_completed_twice", "item_step_checkpoints", "task_rows"):
        dup[key] = 0
    for parent in parents:
        run = await pool.fetchrow("SELECT status, output FROM runs WHERE id = $1", parent)
        assert run is not None
        if run["status"] != "completed":
            lost["runs_not_completed"] += 1
        elif run["output"] != [i + 1 for i in range(items)]:
            lost["join_wrong"] += 1
        done = dict(
            await pool.fetch(
                "SELECT item_index, count(*) FROM runs WHERE parent_run_id = $1 AND status = 'completed'"
                " GROUP BY item_index",
                parent,
            )
        )
        lost["items_never_completed"] += sum(1 for i in range(items) if done.get(i, 0) == 0)
        dup["items_completed_twice"] += sum(max(n - 1, 0) for n in done.values())
        dup["item_step_checkpoints"] += await pool.fetchval(
            "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM run_steps s JOIN runs c ON c.id = s.run_id"
            " WHERE c.parent_run_id = $1 AND s.status = 'completed' GROUP BY s.run_id, s.node_id) x",
            parent,
        )
        dup["task_rows"] += await pool.fetchval(
            "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM tasks t JOIN runs c ON c.id = t.run_id"
            " WHERE c.parent_run_id = $1 GROUP BY t.title) x",
            parent,
        )
    return verdict


@pytest.mark.timeout(300)
async def test_r12_a_loop_of_1000_items_under_kills_runs_each_item_once_and_joins_them_all(
    engine: Engine, recorder: RecordingServer, log_dir: Path
) -> None:
    seed = int(os.environ.get("AGENTFLOW_FAULT_SEED") or random.SystemRandom().randrange(1, 10**6))
    print(f"\nR12 seed={seed} (rerun with AGENTFLOW_FAULT_SEED={seed})")
    await engine.publish_workflow(loop_flow("r12", ITEMS))
    # About 5,000 visits of each failpoint (claims and steps of 1,000 items): 1 in 1,000 fires.
    chaos = await run_chaos(
        engine, recorder, log_dir, flow="r12", runs=1, seed=seed, start_rate=1.0, deadline=240.0,
        probability=0.001,
    )  # fmt: skip
    verdict = await count(engine.db.pool, chaos.run_ids, ITEMS)
    verdict.update(chaos_report(chaos), test_kills=chaos.test_kills)
    print_verdict("R12", verdict)

    assert chaos.supervisor.crashes == [], chaos.supervisor.crashes[:2]
    assert verdict["lost"] == {"runs_not_completed": 0, "items_never_completed": 0, "join_wrong": 0}, (
        f"seed {seed}"
    )
    assert verdict["duplicated"] == {"items_completed_twice": 0, "item_step_checkpoints": 0, "task_rows": 0}
    assert chaos.monitor.summary()["orphaned_runs"] > 0, (
        "no kill hit a run in flight: the test proved nothing"
    )


@pytest.mark.timeout(240)
async def test_r12_negative_control_finds_items_run_twice_when_progress_is_not_atomic(
    engine: Engine, recorder: RecordingServer, log_dir: Path
) -> None:
    seed = int(os.environ.get("AGENTFLOW_FAULT_SEED") or random.SystemRandom().randrange(1, 10**6))
    print(f"\nR12 negative seed={seed}")
    await engine.publish_workflow(loop_flow("r12neg", 100))
    marker = log_dir / "killed-inside-the-window"
    chaos = await run_chaos(
        engine, recorder, log_dir, flow="r12neg", runs=3, seed=seed, start_rate=1.0, deadline=180.0,
        require_coverage=False, prelude=KILL_INSIDE_THE_WINDOW.format(marker=str(marker)),
        probability=0.002,
    )  # fmt: skip
    verdict = await count(engine.db.pool, chaos.run_ids, 100)
    verdict.update(chaos_report(chaos))
    print_verdict("R12 negative", verdict)
    assert marker.exists(), "no worker reached the window: the control proved nothing"
    assert (
        verdict["duplicated"]["items_completed_twice"] + verdict["duplicated"]["item_step_checkpoints"] >= 1
    ), verdict
