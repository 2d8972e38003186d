"""Graph runs under kill -9: parallel branches, a wait on one branch, a join, nothing lost or
run twice.

R1's chaos (two worker processes, each generation armed with a failpoint, the test's own
random kills) runs a graph: a start node fans out to four branches (an engine-table write,
a wait then a step, a plain step, an outside call with the step's idempotency key) that run
at once and a ``merge`` joins before the run finishes. Then an independent count checks every
run completed, every node of every run was checkpointed as completed exactly once, every task
row was written once, every run published ``run.started`` and ``run.completed`` once (lifecycle
events go with their checkpoints), every join saw all four branches, and every call of the keyed branch,
whichever worker made it, carried the one key its completed step records (step numbers of
branches running at once survive kills).

The negative control runs the same chaos against workers whose checkpoint writes the step
and the run's new frontier in two statements (the step first, the frontier 0.3 s later):
a kill in between leaves the step recorded but the frontier behind, and the count must find
nodes run twice (the controls stop as soon as their count finds what they look for).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Callable
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

NODES = ("start", "task", "nap", "after_nap", "plain", "keyed", "join", "done")
BRANCHES = 4


def graph_flow(name: str) -> dict[str, Any]:
    edges = [("start", "task"), ("start", "nap"), ("start", "plain"), ("nap", "after_nap"),
             ("task", "join"), ("after_nap", "join"), ("plain", "join"), ("join", "done"),
             ("start", "keyed"), ("keyed", "join")]  # fmt: skip
    return {
        "name": name,
        "kind": "structured",
        "nodes": [
            {"id": "start", "type": "tool", "tool": "add", "args": {"a": "{{ payload.i }}", "b": 1}},
            {
                "id": "task",
                "type": "tool",
                "tool": "checkpointed_task",
                "args": {"title": "call {{ payload.i }}"},
            },
            {"id": "nap", "type": "wait", "duration": "0.3s"},
            {"id": "after_nap", "type": "tool", "tool": "add", "args": {"a": "{{ steps.start }}", "b": 10}},
            {"id": "plain", "type": "tool", "tool": "add", "args": {"a": "{{ steps.start }}", "b": 100}},
            {"id": "keyed", "type": "tool", "tool": "keyed_call"},
            {"id": "join", "type": "merge"},
            {"id": "done", "type": "finish", "output": "{{ input }}"},
        ],
        "edges": [{"from": a, "to": b} for a, b in edges],
    }


LISTENER = {
    "name": "lifecycle-listener",
    "kind": "structured",
    "trigger": {"topics": ["run.*"], "conditions": {"path": "data.run_id", "op": "equals", "value": "none"}},
    "nodes": [{"id": "done", "type": "finish", "output": "heard"}],
}
"""A workflow that listens to ``run.*`` (and starts nothing): runs publish those events only when
one does."""


# Checkpoint the step with the run's old state, then write the new one 0.3 s later: progress
# that is not atomic with the step (what the engine must never do).
TWO_STATEMENTS = """
import asyncio
from dataclasses import replace
import agentflow.store.runs as runs
_real = runs.checkpoint
_written = {}
async def _split(sender, ws, run_id, token, owner, run, step, effects=runs.Effects(), prior=()):
    pool = getattr(sender, "pool", sender)  # the worker's CommitGroup, or a pool
    old = _written.get(run_id)
    if old is None:
        old = await pool.fetchval("SELECT state FROM runs WHERE id = $1", run_id)
    done = await _real(sender, ws, run_id, token, owner, replace(run, state=old), step, effects, prior)
    if done is not None:
        await asyncio.sleep(0.3)
        await pool.execute("UPDATE runs SET state = $2 WHERE id = $1 AND fencing_token = $3",
                           run_id, run.state, token)
        _written[run_id] = run.state
    return done
runs.checkpoint = _split
"""


# Number a started branch from the worker's memory instead of its place in the state (each
# worker process its own offset): a branch run again after a kill gets another number, so
# its outside call carries another idempotency key (what the engine must never do).
UNSTABLE_NUMBERS = """
import dataclasses, os
import agentflow.core.graph.frontier as frontier
import agentflow.runtime.branches as branches
_real = frontier.mark_started
_offset = 1000 * (os.getpid() % 1000 + 1)
frontier.mark_started = lambda current, started: _real(current, {i: n + _offset for i, n in started.items()})
# A worker that takes the run over numbers the started branches it finds from its memory too
# (each started branch's number as stored, plus its own offset): a branch that a kill cut off
# after its outside call then calls again with another key. Without this the control needed a
# kill before the first sibling's checkpoint stored the number (about a millisecond on a fast
# machine) and found nothing about half the time.
_drive = branches.BranchDriver.drive
async def _renumbering(self, cursor):
    if "ready" in cursor.state:
        ready = [dict(a, seq=a["seq"] % 1000 + _offset) if a.get("seq") is not None else a
                 for a in cursor.state["ready"]]
        cursor = dataclasses.replace(cursor, state={**cursor.state, "ready": ready})
    return await _drive(self, cursor)
branches.BranchDriver.drive = _renumbering
"""


def after_keyed_calls(n: int) -> Callable[[RecordingServer], bool]:
    """A targeted kill as soon as the ``n``-th keyed call arrived (its step not checkpointed)."""
    return lambda recorder: len(recorder.calls("/keyed")) >= n


KEYED_KILLS = (after_keyed_calls(5), after_keyed_calls(20), after_keyed_calls(35))


async def count(pool: asyncpg.Pool, run_ids: list[UUID], recorder: RecordingServer) -> dict[str, Any]:
    """The independent reconciliation: per run, node, table and outside call."""
    rows = await pool.fetch(
        "SELECT r.id, r.status, r.output, s.node_id, count(s.id) FILTER (WHERE s.status = 'completed') AS n"
        " FROM runs r LEFT JOIN run_steps s ON s.run_id = r.id WHERE r.id = ANY($1)"
        " GROUP BY r.id, r.status, r.output, s.node_id",
        run_ids,
    )
    tasks = dict(
        await pool.fetch("SELECT run_id, count(*) FROM tasks WHERE run_id = ANY($1) GROUP BY run_id", run_ids)
    )
    by_run: dict[UUID, dict[str, Any]] = {}
    for row in rows:
        entry = by_run.setdefault(row["id"], {"status": row["status"], "output": row["output"], "steps": {}})
        if row["node_id"] is not None:
            entry["steps"][row["node_id"]] = row["n"]
    twice = sorted({n for e in by_run.values() for n, k in e["steps"].items() if k > 1})
    keys = dict(
        await pool.fetch(
            "SELECT run_id::text, idempotency_key FROM run_steps"
            " WHERE run_id = ANY($1) AND node_id = 'keyed' AND status = 'completed'",
            run_ids,
        )
    )
    told = Counter(
        (r["run_id"], r["topic"])
        for r in await pool.fetch(
            "SELECT data->>'run_id' AS run_id, topic FROM events"
            " WHERE topic IN ('run.started', 'run.completed') AND data->>'run_id' = ANY($1)",
            [str(run_id) for run_id in run_ids],
        )
    )
    calls = [c for c in recorder.calls("/keyed") if c.body.get("run_id") in keys]
    applied = Counter(str(body.get("run_id")) for body in recorder.applied("/keyed").values())
    return {
        "runs": len(run_ids),
        "lost": {
            "runs_not_completed": sum(1 for e in by_run.values() if e["status"] != "completed"),
            "node_checkpoints": sum(1 for e in by_run.values() for n in NODES if e["steps"].get(n, 0) == 0),
            "task_rows": sum(1 for run_id in run_ids if tasks.get(run_id, 0) == 0),
            "joined_branches": sum(
                # (a sabotaged run may end with anything as its output: count what it joined)
                BRANCHES - (len(e["output"]) if isinstance(e["output"], dict) else 0)
                for e in by_run.values()
                if e["status"] == "completed"
            ),
            "keyed_effects": sum(1 for run_id in run_ids if applied[str(run_id)] == 0),
            # Lifecycle events go with their checkpoint: a completed run told its start and end.
            "lifecycle_events": sum(
                1
                for run_id, e in by_run.items()
                for topic in ("run.started", "run.completed")
                if e["status"] == "completed" and told[(str(run_id), topic)] == 0
            ),
        },
        "keyed_calls_with_another_key": sum(1 for c in calls if c.key != keys[c.body["run_id"]]),
        "duplicated": {
            "node_checkpoints": sum(max(k - 1, 0) for e in by_run.values() for k in e["steps"].values()),
            "nodes_run_twice": twice,
            "task_rows": sum(max(n - 1, 0) for n in tasks.values()),
            "keyed_effects": sum(n - 1 for n in applied.values() if n > 1),
            "lifecycle_events": sum(n - 1 for n in told.values() if n > 1),
        },
        "keyed_raw_calls": len(calls),
    }


async def found(
    engine: Engine, recorder: RecordingServer, run_ids: list[UUID], holds: Callable[[dict[str, Any]], bool]
) -> bool:
    """Whether the count over the runs started so far already shows what a control looks for."""
    return bool(run_ids) and holds(await count(engine.db.pool, list(run_ids), recorder))


@pytest.mark.timeout(240)
async def test_graph_runs_under_kills_run_every_node_once_and_join_every_branch(
    engine: Engine, recorder: RecordingServer, log_dir: Path
) -> None:
    seed = int(os.environ.get("AGENTFLOW_FAULT_SEED") or random.SystemRandom().randrange(1, 10**6))
    print(f"\ngraph kills seed={seed} (rerun with AGENTFLOW_FAULT_SEED={seed})")
    await engine.publish_workflow(graph_flow("graph-kills"))
    await engine.publish_workflow(LISTENER)  # so that runs publish their lifecycle events
    chaos = await run_chaos(
        engine, recorder, log_dir, flow="graph-kills", runs=60, seed=seed, start_rate=8.0, deadline=180.0,
        targeted_kills=KEYED_KILLS,
    )  # fmt: skip
    verdict = await count(engine.db.pool, chaos.run_ids, recorder)
    verdict.update(chaos_report(chaos), test_kills=chaos.test_kills)
    print_verdict("graph kills", verdict)

    assert chaos.supervisor.crashes == [], chaos.supervisor.crashes[:2]
    assert verdict["lost"] == {
        "runs_not_completed": 0,
        "node_checkpoints": 0,
        "task_rows": 0,
        "joined_branches": 0,
        "keyed_effects": 0,
        "lifecycle_events": 0,
    }
    assert verdict["duplicated"] == {
        "node_checkpoints": 0,
        "nodes_run_twice": [],
        "task_rows": 0,
        "keyed_effects": 0,
        "lifecycle_events": 0,
    }, f"seed {seed}"
    assert verdict["keyed_calls_with_another_key"] == 0, f"seed {seed}"
    assert verdict["keyed_raw_calls"] > verdict["runs"], (
        "no keyed branch ran again: its key was not put to the test"
    )
    assert chaos.monitor.summary()["orphaned_runs"] > 0, (
        "no kill hit a run in flight: the test proved nothing"
    )


@pytest.mark.timeout(180)
async def test_graph_kills_negative_control_finds_nodes_run_twice_when_progress_is_not_atomic(
    engine: Engine, recorder: RecordingServer, log_dir: Path
) -> None:
    seed = int(os.environ.get("AGENTFLOW_FAULT_SEED") or random.SystemRandom().randrange(1, 10**6))
    print(f"\ngraph kills negative seed={seed}")
    await engine.publish_workflow(graph_flow("graph-kills-neg"))
    chaos = await run_chaos(
        engine, recorder, log_dir, flow="graph-kills-neg", runs=40, seed=seed, start_rate=8.0, deadline=150.0,
        require_coverage=False, prelude=TWO_STATEMENTS,
        enough=lambda run_ids: found(engine, recorder, run_ids, lambda v: v["duplicated"]["node_checkpoints"] >= 1),
    )  # fmt: skip
    verdict = await count(engine.db.pool, chaos.run_ids, recorder)
    verdict.update(chaos_report(chaos))
    print_verdict("graph kills negative", verdict)
    assert verdict["duplicated"]["node_checkpoints"] >= 1, verdict


@pytest.mark.timeout(180)
async def test_graph_kills_negative_control_finds_keys_that_change_when_numbers_come_from_memory(
    engine: Engine, recorder: RecordingServer, log_dir: Path
) -> None:
    seed = int(os.environ.get("AGENTFLOW_FAULT_SEED") or random.SystemRandom().randrange(1, 10**6))
    print(f"\ngraph kills unstable-number seed={seed}")
    await engine.publish_workflow(graph_flow("graph-kills-keys"))
    chaos = await run_chaos(
        engine, recorder, log_dir, flow="graph-kills-keys", runs=40, seed=seed, start_rate=8.0, deadline=150.0,
        require_coverage=False, prelude=UNSTABLE_NUMBERS, targeted_kills=KEYED_KILLS,
        enough=lambda run_ids: found(engine, recorder, run_ids, lambda v: v["keyed_calls_with_another_key"] >= 1),
    )  # fmt: skip
    verdict = await count(engine.db.pool, chaos.run_ids, recorder)
    verdict.update(chaos_report(chaos))
    print_verdict("graph kills unstable numbers", verdict)
    assert verdict["keyed_calls_with_another_key"] >= 1, verdict
