"""R10: thousands of concurrent trigger calls over a few hundred enrollment keys, from several
processes into two servers: exactly one active run per key, every other call in its inbox.

The calls go through the private trigger of two real ``agentflow serve`` processes (each with
its worker, which takes the runs into a long wait so they stay active). Meanwhile an
independent connection samples the runs table: no key may ever have two active runs. At the
end a reconciliation from independent queries checks runs, decisions, inboxes and answers.

Negative control: the same reconciliation over a naive enrollment (look for an active run,
insert one if there is none, with the unique index dropped) under the same kind of
concurrency must find keys with several active runs, showing that the race is real at this
load and that the check would catch it.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from agentflow.engine import Engine
from tests.conftest import make_settings
from tests.support.processes import REPO, worker_env
from tests.support.serve_process import ServeProcess

pytestmark = pytest.mark.fault

CALLS_PER_PROCESS = 800
PROCESSES = 4
KEYS = 300


def workflow(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "structured",
        "trigger": {"enrollment": {"key": "{{ event.data.key }}"}},
        "nodes": [{"id": "hold", "type": "wait", "duration": "1h"}, {"id": "done", "type": "finish"}],
    }


async def reconcile(conn: asyncpg.Connection, workflow_id: UUID) -> dict[str, Any]:
    """Independent counts for one workflow's runs: keys with more than one active run, etc."""
    per_key = await conn.fetch(
        "SELECT enrollment_key, count(*) FILTER (WHERE active) AS active, count(*) AS runs FROM runs"
        " WHERE workflow_id = $1 GROUP BY enrollment_key",
        workflow_id,
    )
    return {
        "keys": len(per_key),
        "keys_with_two_active": sum(1 for r in per_key if r["active"] > 1),
        "keys_with_no_active": sum(1 for r in per_key if r["active"] == 0),
        "runs": sum(r["runs"] for r in per_key),
    }


async def test_r10_one_active_run_per_key_under_concurrent_triggers(
    database_url: str, tmp_path: Path
) -> None:
    seed = random.randrange(2**32)
    print(f"R10 seed {seed}")
    async with Engine.open(make_settings(database_url), migrate_schema=False) as engine:
        published = await engine.publish_workflow(workflow("r10"))
        _record, api_key = await engine.keys.create(
            "api", "r10", workspace_id=published.workflow.workspace_id
        )
    workflow_id = published.workflow.id
    env = worker_env(database_url, lease_ttl=5, poll_interval=0.2, pool_max_size=10, measured=True)
    servers = []
    for index in range(2):
        (tmp_path / f"s{index}").mkdir()
        servers.append(ServeProcess(env, tmp_path / f"s{index}", concurrency=16))
    watcher = await asyncpg.connect(database_url)
    try:
        for server in servers:
            await asyncio.to_thread(server.wait_ready)
        urls = [server.url for server in servers]
        loads = []
        for p in range(PROCESSES):
            plan = {
                "urls": urls, "workflow": str(workflow_id), "api_key": api_key, "count": CALLS_PER_PROCESS,
                "keys": KEYS, "concurrency": 16, "seed": seed + p, "prefix": f"p{p}",
            }  # fmt: skip
            loads.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "tests.support.trigger_load",
                    json.dumps(plan),
                    cwd=REPO,
                    stdout=asyncio.subprocess.PIPE,
                    env=env,
                )
            )
        outputs = asyncio.gather(*(load.communicate() for load in loads))
        worst = 0
        samples = 0
        started = time.monotonic()
        while not outputs.done():
            worst = max(worst, (await reconcile(watcher, workflow_id))["keys_with_two_active"])
            samples += 1
            await asyncio.sleep(0.05)
        results = [call for out, _err in await outputs for call in json.loads(out)]
        elapsed = time.monotonic() - started
        final = await reconcile(watcher, workflow_id)
        runs = {r["enrollment_key"]: r["id"] for r in await watcher.fetch(
            "SELECT enrollment_key, id FROM runs WHERE workflow_id = $1", workflow_id
        )}  # fmt: skip
        inbox = await watcher.fetch(
            "SELECT run_id, kind, payload->>'message_id' AS call FROM run_inbox i JOIN runs r ON r.id = i.run_id"
            " WHERE r.workflow_id = $1",
            workflow_id,
        )
        decisions = Counter(
            r["decision"]
            for r in await watcher.fetch(
                "SELECT decision FROM dispatch_decisions WHERE workflow_id = $1", workflow_id
            )
        )
    finally:
        await watcher.close()
        exits = [server.stop() for server in servers]
    statuses = Counter(str(call["status"]) for call in results)
    keys_used = {call["key"] for call in results}
    delivered = Counter(row["call"] for row in inbox)
    wrong_run = [c["id"] for c in results if c["answer"] and c["answer"]["run_id"] != str(runs.get(c["key"]))]
    key_of = {c["id"]: c["key"] for c in results}
    inbox_of_other_run = [r["call"] for r in inbox if runs.get(key_of.get(r["call"], "")) != r["run_id"]]
    verdict = {
        "seed": seed,
        "calls": len(results),
        "seconds": round(elapsed, 1),
        "statuses": dict(statuses),
        "keys_used": len(keys_used),
        "samples": samples,
        "worst_keys_with_two_active_sampled": worst,
        **final,
        "decisions": dict(decisions),
        "calls_not_in_an_inbox": sum(1 for c in results if delivered[c["id"]] == 0),
        "calls_in_two_inboxes": sum(1 for n in delivered.values() if n > 1),
        "answers_naming_another_run": len(wrong_run),
        "inbox_rows_in_the_wrong_run": len(inbox_of_other_run),
    }
    print("R10 verdict", json.dumps(verdict))
    assert len(results) == PROCESSES * CALLS_PER_PROCESS
    assert set(statuses) <= {"202", "200"}, "no 5xx, no call given up"
    assert worst == 0 and final["keys_with_two_active"] == 0, "never two active runs for one key"
    assert final["keys"] == len(keys_used) == final["runs"], "exactly one run per key"
    assert final["keys_with_no_active"] == 0
    assert decisions == {"started": len(keys_used), "enrolled": len(results) - len(keys_used)}
    assert verdict["calls_not_in_an_inbox"] == 0 and verdict["calls_in_two_inboxes"] == 0
    assert not wrong_run and not inbox_of_other_run
    assert exits == [0, 0] and all(not s.error_logs() for s in servers), "clean shutdown, no ERROR logged"


async def test_r10_negative_control_a_naive_enrollment_doubles_runs(database_url: str) -> None:
    """Look-then-insert without the unique index, at the same kind of concurrency: duplicates."""
    async with Engine.open(make_settings(database_url), migrate_schema=False) as engine:
        published = await engine.publish_workflow(workflow("naive"))
    conn = await asyncpg.connect(database_url)
    await conn.execute("DROP INDEX runs_one_active_per_key")
    pool = await asyncpg.create_pool(database_url, min_size=16, max_size=16)
    workflow_id, workspace_id = published.workflow.id, published.workflow.workspace_id
    rng = random.Random(7)

    async def naive_start(key: str) -> None:
        async with pool.acquire() as c, c.transaction():
            active = await c.fetchval(
                "SELECT id FROM runs WHERE workflow_id = $1 AND enrollment_key = $2 AND active",
                workflow_id,
                key,
            )
            await asyncio.sleep(0)  # a dispatcher does other work here (conditions, templates)
            if active is None:
                await c.execute(
                    "INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, enrollment_key, due_at)"
                    " VALUES ($1, gen_random_uuid(), $2, 1, $3, now())",
                    workspace_id,
                    workflow_id,
                    key,
                )

    try:
        keys = [f"k{rng.randrange(50)}" for _ in range(800)]
        for chunk in range(0, len(keys), 32):
            await asyncio.gather(*(naive_start(k) for k in keys[chunk : chunk + 32]))
        verdict = await reconcile(conn, workflow_id)
    finally:
        await pool.close()
        await conn.close()
    print("R10 negative control", json.dumps(verdict))
    assert verdict["keys_with_two_active"] > 0, "the naive enrollment must be caught"
