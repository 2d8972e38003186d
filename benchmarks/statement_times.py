"""Where a workload's time goes in PostgreSQL and in each process: statements and CPU.

    AGENTFLOW_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        python benchmarks/statement_times.py --workload W1 --runs 4000

It resets ``pg_stat_statements`` on that server, runs ``agentflow bench`` with the given
workload (the benchmark makes and drops its own databases there), samples the CPU time of
every process meanwhile (PostgreSQL's, the benchmark's worker processes, the benchmark itself)
and prints the CPU each role used and the statements that took PostgreSQL the most time:
calls, execution and planning time in all and per call, and how many plans were made (as many
plans as calls: a custom plan for each execution).

The server must load the extension (the embedded server cannot): on Debian's PostgreSQL,
``shared_preload_libraries = 'pg_stat_statements'`` and ``pg_stat_statements.track_planning =
on`` in a file of ``conf.d``, then restart it. Execution times are wall times inside the
server: on a busy machine they include waiting for a CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import subprocess
import sys
import time

import asyncpg
import psutil

TOP = """
SELECT calls, total_exec_time AS exec_ms, total_plan_time AS plan_ms, plans,
       left(regexp_replace(query, '\\s+', ' ', 'g'), $2) AS query
FROM pg_stat_statements
WHERE query NOT LIKE '%pg_stat_statements%'
ORDER BY total_exec_time + total_plan_time DESC
LIMIT $1
"""


def role(process: psutil.Process) -> str | None:
    """Which part of the benchmark a process is, by its command line."""
    try:
        line = " ".join(process.cmdline())
        name = process.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    if name.startswith("postgres") or "postgres:" in line:
        return "postgresql"
    if "agentflow" in line and "worker" in line:
        return "workers"
    if "agentflow" in line and "bench" in line:
        return "benchmark"
    return None


def run_sampling(command: list[str]) -> dict[str, float]:
    """Run ``command``; the CPU seconds each role used meanwhile (each process's last sample)."""
    before = {p.pid: sum(p.cpu_times()[:2]) for p in psutil.process_iter() if role(p) == "postgresql"}
    last: dict[int, tuple[str, float]] = {}
    child = subprocess.Popen(command, stdout=sys.stderr)
    while child.poll() is None:
        for process in psutil.process_iter():
            if (kind := role(process)) is not None:
                try:
                    last[process.pid] = (kind, sum(process.cpu_times()[:2]))
                except psutil.Error:
                    continue
        time.sleep(0.05)
    used: dict[str, float] = collections.defaultdict(float)
    for pid, (kind, seconds) in last.items():
        used[kind] += seconds - before.get(pid, 0.0)  # a server running before: only this run's
    return dict(used)


async def main(args: argparse.Namespace) -> None:
    url = os.environ.get("AGENTFLOW_DATABASE_URL")
    if not url:
        sys.exit("set AGENTFLOW_DATABASE_URL to a server that loads pg_stat_statements")
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        await conn.execute("SELECT pg_stat_statements_reset()")
        command = ["agentflow", "bench", "--workload", args.workload]
        command += ["--runs", str(args.runs)] if args.runs else []
        used = await asyncio.to_thread(run_sampling, command)
        rows = await conn.fetch(TOP, args.top, args.width)
    finally:
        await conn.close()
    print("CPU seconds by role: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(used.items())))
    total = sum(r["exec_ms"] + r["plan_ms"] for r in rows) or 1.0
    print(f"{'calls':>7} {'exec ms':>9} {'/call':>7} {'plan ms':>8} {'plans':>6} {'share':>6}  statement")
    for r in rows:
        share = (r["exec_ms"] + r["plan_ms"]) / total
        per_call = r["exec_ms"] / max(r["calls"], 1)
        print(
            f"{r['calls']:>7} {r['exec_ms']:>9.0f} {per_call:>7.3f} {r['plan_ms']:>8.0f} {r['plans']:>6}"
            f" {share:>6.1%}  {r['query']}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", default="W1")
    parser.add_argument("--runs", type=int, default=None, help="passed to agentflow bench --runs")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--width", type=int, default=70, help="characters of each statement shown")
    asyncio.run(main(parser.parse_args()))
