"""A 10,000-item loop leaves a worker's memory flat: items are child runs in the database,
and the parent never holds their results until it joins them.

One worker process runs a ``for_each`` over 10,000 items (concurrency 50); its RSS is
sampled while the loop runs. The control runs the same loop on a worker that keeps every
step's output (padded to 8 KB) in memory, as an engine that held a loop's items in the
worker would: its growth shows the bound can fail (it stops once past twice the bound).
"""

from __future__ import annotations

import asyncio
import math
import statistics
from pathlib import Path

import psutil
import pytest

from agentflow.engine import Engine
from tests.fault.test_memory import MB, sample_rss
from tests.support.processes import WorkerProcess, worker_env
from tests.support.recording_server import RecordingServer

pytestmark = pytest.mark.fault

ITEMS = 10_000
BOUND_MB = 40.0

HOARDER = """
import agentflow.runtime.step as step
_real = step.execute
_kept = []
async def _hoard(*args, **kwargs):
    outcome = await _real(*args, **kwargs)
    _kept.append((outcome.step.output, "x" * 8192))
    return outcome
step.execute = _hoard
"""

LOOP = {
    "name": "big-loop",
    "kind": "structured",
    "nodes": [
        {"id": "each", "type": "for_each", "items": f"{{{{ range({ITEMS}) | list }}}}", "concurrency": 50,
         "max_items": ITEMS},
        {"id": "item", "type": "tool", "tool": "echo", "args": {"value": "{{ input }}"}},
        {"id": "joined", "type": "finish", "output": "{{ input | length }}"},
    ],
    "edges": [{"from": "each", "port": "iteration", "to": "item"}, {"from": "each", "port": "done", "to": "joined"}],
}  # fmt: skip


async def track_peak(pid: int, peak: list[int], ceiling: float) -> None:
    """Keep ``peak[0]`` at the process's highest RSS seen; return once it passes ``ceiling``."""
    process = psutil.Process(pid)
    while peak[0] <= ceiling:
        peak[0] = max(peak[0], process.memory_info().rss)
        await asyncio.sleep(0.2)


async def loop_growth(
    engine: Engine,
    recorder: RecordingServer,
    log_dir: Path,
    name: str,
    prelude: str,
    *,
    until_above: float = math.inf,
) -> float:
    """Run the loop on a fresh worker process; return its RSS growth in MB.

    ``until_above``: stop as soon as the growth passes this many MB (the control need not
    finish its loop to show that the measure can fail).
    """
    env = worker_env(engine.db.url, recorder.url, lease_ttl=10, poll_interval=0.2)
    worker = WorkerProcess(name, env, log_dir, concurrency=32, prelude=prelude)
    try:
        await asyncio.to_thread(worker.wait_ready)
        warm = await engine.start_run("warm")
        assert (await engine.wait_for_run(warm.id, timeout=30)).status == "completed"
        base = statistics.median(await sample_rss(worker.pid, 1.0))
        run = await engine.start_run("big-loop")
        peak = [0]
        sampler = asyncio.create_task(track_peak(worker.pid, peak, base + until_above * MB))
        waiting = asyncio.create_task(engine.wait_for_run(run.id, timeout=240))
        await asyncio.wait({sampler, waiting}, return_when=asyncio.FIRST_COMPLETED)
        sampler.cancel()
        if waiting.done():
            done = waiting.result()
            assert done.status == "completed", done.error
            assert done.output == ITEMS
        else:
            waiting.cancel()
    finally:
        worker.stop()
    return (peak[0] - base) / MB


@pytest.mark.timeout(600)
async def test_a_loop_of_ten_thousand_items_leaves_the_worker_memory_flat(
    engine: Engine, recorder: RecordingServer, log_dir: Path
) -> None:
    await engine.publish_workflow(LOOP)
    await engine.publish_workflow(
        {"name": "warm", "kind": "structured", "nodes": [{"id": "a", "type": "tool", "tool": "echo"}]}
    )
    growth = await loop_growth(engine, recorder, log_dir, "loop-memory", "")
    hoarding = await loop_growth(
        engine, recorder, log_dir, "loop-memory-hoarder", HOARDER, until_above=2 * BOUND_MB
    )
    print(
        f"\nloop memory: {ITEMS} items: worker RSS growth {growth:+.1f} MB; hoarding control {hoarding:+.1f} MB"
    )
    assert growth < BOUND_MB
    assert hoarding > BOUND_MB, "the control must show the measure can fail"
