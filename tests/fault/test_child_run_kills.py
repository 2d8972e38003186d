"""Child runs under kill -9: one parent, 100 children of another workflow, each started once,
and the parent resumes once (issue 13, ``run_workflow``).

R1's chaos (two worker processes, each generation armed with a failpoint, the test's own
kills: every worker as the 10th, 40th and 70th child calls out, then at random) runs one parent: a ``for_each`` over 100 items whose body is a ``run_workflow``
of a second workflow (a keyed outside call and a task row written in the checkpoint). Each
item waits durably for its child; the children's ends wake the items, the items' ends wake the
parent. An independent count then checks: the parent completed with 100 results and its join
and finish were each checkpointed once; each item started exactly one child run and recorded
one start step; each child ran its nodes once, wrote its task row once, and its keyed call took
effect once.

The negative control starts the child the way the engine must not: the step inserts the child
run itself, through its own connection, before its checkpoint (and lingers), so a kill between
the two makes the retried step start a second child; the count must find an item with two.
It kills every worker as the positive test does (children calling out while their items'
steps linger after the start): left to random kills, a fast machine ran the whole parent in
12 s with no kill inside a step's window, and the control found nothing.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from agentflow.engine import Engine
from tests.fault.checks import print_verdict
from tests.fault.test_graph_kills import after_keyed_calls
from tests.fault.test_r1_kills import chaos_report, run_chaos
from tests.support.recording_server import RecordingServer

pytestmark = pytest.mark.fault

CHILDREN = 100
KILLS = (after_keyed_calls(10), after_keyed_calls(40), after_keyed_calls(70))
"""Every worker is killed as the 10th, 40th and 70th child makes its keyed call: the whole run
takes a few seconds on an idle machine, before the random kills would begin."""
KID_NODES = ("keyed", "task", "done")


def kid_flow(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "structured",
        "nodes": [
            {"id": "keyed", "type": "tool", "tool": "keyed_call"},
            {
                "id": "task",
                "type": "tool",
                "tool": "checkpointed_task",
                "args": {"title": "kid {{ payload.i }}"},
            },
            {"id": "done", "type": "finish", "output": {"i": "{{ payload.i }}"}},
        ],
    }


def parent_flow(name: str, kid: str) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "structured",
        "nodes": [
            {
                "id": "each",
                "type": "for_each",
                "items": f"{{{{ range({CHILDREN}) | list }}}}",
                "concurrency": 20,
            },
            {"id": "call", "type": "run_workflow", "workflow": kid, "input": {"i": "{{ input }}"}},
            {"id": "done", "type": "finish", "output": "{{ input | map(attribute='i') | list }}"},
        ],
        "edges": [
            {"from": "each", "port": "iteration", "to": "call"},
            {"from": "each", "port": "done", "to": "done"},
        ],
    }


# Start the child outside the checkpoint, as its own committed insert, then linger: a kill in
# between leaves the child started and the step not recorded (what the engine must never do).
OUTSIDE_START = """
import asyncio, uuid
import agentflow.nodes.run_workflow as rw
from agentflow.core.step_results import NodeResult
_real = rw.RunWorkflowRunner.run
async def _started_outside(self, node, ctx, env):
    shown, result = await _real(self, node, ctx, env)
    kid = result.child_run
    await env.workflows._pool.execute(
        "INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input, state,"
        " parent_run_id, caller_node, due_at) VALUES ($1, $2, $3, $4, 'created', $5, $6, $7, $8, now())",
        ctx.workspace_id, uuid.uuid4(), uuid.UUID(kid["workflow_id"]), kid["workflow_version"],
        kid["input"], result.child_state, ctx.run_id, kid["caller_node"])
    await asyncio.sleep(0.3)
    return shown, NodeResult(output=result.output)
rw.RunWorkflowRunner.run = _started_outside
"""


async def count(pool: asyncpg.Pool, parent: UUID, kid: str, recorder: RecordingServer) -> dict[str, Any]:
    """The independent reconciliation of one parent, its items and their children."""
    top = await pool.fetchrow("SELECT status, output FROM runs WHERE id = $1", parent)
    assert top is not None
    items = [r["id"] for r in await pool.fetch("SELECT id FROM runs WHERE parent_run_id = $1", parent)]
    kids = await pool.fetch(
        "SELECT r.id, r.parent_run_id, r.status, r.input->>'i' AS i FROM runs r"
        " JOIN workflows w ON w.id = r.workflow_id WHERE w.name = $1",
        kid,
    )
    kid_ids = [k["id"] for k in kids]
    steps = await pool.fetch(
        "SELECT run_id, node_id, count(*) FILTER (WHERE status = 'completed') AS n FROM run_steps"
        " WHERE run_id = ANY($1) GROUP BY run_id, node_id",
        [parent, *items, *kid_ids],
    )
    done = {(r["run_id"], r["node_id"]): r["n"] for r in steps}
    starts = Counter(
        r["run_id"]
        for r in await pool.fetch(
            "SELECT run_id FROM run_steps WHERE run_id = ANY($1) AND node_id = 'call'"
            " AND status = 'completed' AND output ? 'run_id'",
            items,
        )
    )
    tasks = Counter(
        r["run_id"] for r in await pool.fetch("SELECT run_id FROM tasks WHERE run_id = ANY($1)", kid_ids)
    )
    per_item = Counter(k["parent_run_id"] for k in kids)
    applied = Counter(str(body.get("run_id")) for body in recorder.applied("/keyed").values())
    indexes = Counter(k["i"] for k in kids)
    return {
        "parent": {
            "status": top["status"],
            "results": len(top["output"]) if isinstance(top["output"], list) else None,
        },
        "items": len(items),
        "children": len(kids),
        "lost": {
            "children_not_completed": sum(1 for k in kids if k["status"] != "completed"),
            "items_without_child": sum(1 for item in items if per_item[item] == 0),
            "child_indexes": CHILDREN - len(indexes),
            "child_node_checkpoints": sum(1 for k in kid_ids for n in KID_NODES if done.get((k, n), 0) == 0),
            "task_rows": sum(1 for k in kid_ids if tasks[k] == 0),
            "keyed_effects": sum(1 for k in kid_ids if applied[str(k)] == 0),
        },
        "duplicated": {
            "children_of_one_item": sum(n - 1 for n in per_item.values() if n > 1),
            "children_of_one_index": sum(n - 1 for n in indexes.values() if n > 1),
            "start_steps": sum(n - 1 for n in starts.values() if n > 1),
            "parent_resumed": max(done.get((parent, "done"), 0) - 1, 0),
            "child_node_checkpoints": sum(max(n - 1, 0) for (r, _), n in done.items() if r in set(kid_ids)),
            "task_rows": sum(n - 1 for n in tasks.values() if n > 1),
            "keyed_effects": sum(n - 1 for n in applied.values() if n > 1),
        },
    }


@pytest.mark.timeout(300)
async def test_a_hundred_children_under_kills_start_once_each_and_the_parent_resumes_once(
    engine: Engine, recorder: RecordingServer, log_dir: Path
) -> None:
    seed = int(os.environ.get("AGENTFLOW_FAULT_SEED") or random.SystemRandom().randrange(1, 10**6))
    print(f"\nchild run kills seed={seed} (rerun with AGENTFLOW_FAULT_SEED={seed})")
    await engine.publish_workflow(kid_flow("kid"))
    await engine.publish_workflow(parent_flow("family", "kid"))
    chaos = await run_chaos(
        engine, recorder, log_dir, flow="family", runs=1, seed=seed, start_rate=1.0, deadline=240.0,
        require_coverage=False, targeted_kills=KILLS,
    )  # fmt: skip
    verdict = await count(engine.db.pool, chaos.run_ids[0], "kid", recorder)
    verdict.update(chaos_report(chaos), test_kills=chaos.test_kills)
    print_verdict("child run kills", verdict)

    assert chaos.supervisor.crashes == [], chaos.supervisor.crashes[:2]
    assert verdict["parent"] == {"status": "completed", "results": CHILDREN}
    assert (verdict["items"], verdict["children"]) == (CHILDREN, CHILDREN)
    assert set(verdict["lost"].values()) == {0}, f"seed {seed}: {verdict['lost']}"
    assert set(verdict["duplicated"].values()) == {0}, f"seed {seed}: {verdict['duplicated']}"
    assert chaos.monitor.summary()["orphaned_runs"] > 0, (
        "no kill hit a run in flight: the test proved nothing"
    )


@pytest.mark.timeout(240)
async def test_child_run_kills_negative_control_finds_two_children_when_the_step_starts_its_own(
    engine: Engine, recorder: RecordingServer, log_dir: Path
) -> None:
    seed = int(os.environ.get("AGENTFLOW_FAULT_SEED") or random.SystemRandom().randrange(1, 10**6))
    print(f"\nchild run kills negative seed={seed}")
    await engine.publish_workflow(kid_flow("kid-neg"))
    await engine.publish_workflow(parent_flow("family-neg", "kid-neg"))

    async def twice(run_ids: list[UUID]) -> bool:
        if not run_ids:
            return False
        verdict = await count(engine.db.pool, run_ids[0], "kid-neg", recorder)
        return bool(verdict["duplicated"]["children_of_one_index"] >= 1)

    chaos = await run_chaos(
        engine, recorder, log_dir, flow="family-neg", runs=1, seed=seed, start_rate=1.0, deadline=180.0,
        require_coverage=False, prelude=OUTSIDE_START, enough=twice, targeted_kills=KILLS,
    )  # fmt: skip
    verdict = await count(engine.db.pool, chaos.run_ids[0], "kid-neg", recorder)
    verdict.update(chaos_report(chaos))
    print_verdict("child run kills negative", verdict)
    assert verdict["duplicated"]["children_of_one_index"] >= 1, verdict
