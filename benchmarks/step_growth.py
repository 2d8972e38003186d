"""Does a step cost more late in a long run? W2's steps by position, over many runs.

    python benchmarks/step_growth.py --runs 24 --steps 1000

W2 reports the p50 of the first and the last 100 steps of one 1,000-step run, and one run
sometimes shows the last 100 slower (issue 17 asked to find what grows with a run's length).
One run cannot tell a cost that grows with the run from a machine that slowed down meanwhile.
This runs ``--runs`` runs of W2's workflow one after another on one worker process (as W2
does, on a new embedded server or the server of ``AGENTFLOW_DATABASE_URL``) and prints:

- the median over runs of each tenth's p50 step gap: a cost proportional to the run's length
  rises from the first tenth to the last in every run, so it rises in the medians too;
- each run's least-squares slope of step gap against step number, in ms per 1,000 steps: the
  median over runs, a 90% bootstrap interval of that median, and how many runs sloped up. A
  slope whose interval holds 0 is not there at this precision; the machine's drift goes
  either way from run to run and cancels out in the median.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics

from agentflow.bench import queries
from agentflow.bench.context import chain, publish
from agentflow.bench.database import bench_server
from agentflow.bench.processes import worker_group
from agentflow.engine import Engine
from agentflow.settings import Settings

BOOTSTRAP = 2000


def median_interval(values: list[float], rng: random.Random) -> tuple[float, float]:
    """A 90% percentile-bootstrap interval of the median of ``values``."""
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(BOOTSTRAP))
    return medians[int(0.05 * BOOTSTRAP)], medians[int(0.95 * BOOTSTRAP) - 1]


async def measure(url: str, runs: int, steps: int) -> list[list[tuple[int, float]]]:
    """Per run, (step number, ms since the previous step finished) of every step after the first."""
    gaps: list[list[tuple[int, float]]] = []
    async with Engine.open(Settings(database_url=url), migrate_schema=False) as engine:
        workflow = await publish(engine, chain("step_growth", steps))
        async with worker_group(url, 1, 1) as group:
            for index in range(runs):
                run = await engine.start_run(workflow)
                await queries.wait_until_ended(engine.db.pool, workflow, index + 1, timeout=60 + steps / 10)
                gaps.append(
                    [(seq, gap * 1000) for seq, gap, _ran in await queries.step_gaps(engine.db.pool, run.id)]
                )
                print(f"run {index + 1}/{runs}", flush=True)
            group.check_alive()
    return gaps


async def main(runs: int, steps: int) -> None:
    async with bench_server(os.environ.get("AGENTFLOW_DATABASE_URL")) as server, server.database() as url:
        gaps = await measure(url, runs, steps)
    tenth = max(steps // 10, 1)
    tenths = [
        [statistics.median(g for seq, g in run if k * tenth <= seq < (k + 1) * tenth) for k in range(10)]
        for run in gaps
    ]
    print("median over runs of each tenth's p50 step gap (ms):")
    print("  " + " ".join(f"{statistics.median(column):.3f}" for column in zip(*tenths, strict=True)))
    # ms per 1,000 steps
    slopes = [statistics.linear_regression(*zip(*run, strict=True)).slope * 1000 for run in gaps]
    low, high = median_interval(slopes, random.Random(1))
    typical = statistics.median(g for run in gaps for _, g in run)
    print(
        f"slope of step gap along a run: median {statistics.median(slopes):+.3f} ms per 1,000 steps"
        f" (90% interval {low:+.3f} .. {high:+.3f}); {sum(s > 0 for s in slopes)} of {runs} runs sloped up;"
        f" a step's p50 is {typical:.3f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=24)
    parser.add_argument("--steps", type=int, default=1000, help="at most 1,000 (a workflow's node limit)")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.runs, arguments.steps))
