"""Profile `agentflow bench` while it runs: py-spy on its worker processes and on itself.

    python benchmarks/profile_workers.py --workload W1 --runs 20000 --seconds 15
    python benchmarks/profile_workers.py --workload E3 --seconds 10 --delay 0

It starts the benchmark, waits until its worker processes exist (plus ``--delay`` seconds),
samples every worker and the benchmark process for ``--seconds`` with `py-spy record`
(200 Hz, not pausing them), waits for the benchmark to finish and prints, per role, the
functions that held the CPU most: by their own time and including what they called. Samples
are of busy threads only, so shares are of the time a process was working.

A sample inside `_SelectorSocketTransport.write` (the `send()` of a statement to PostgreSQL)
mostly counts the database working: on two cores the backend the `send()` wakes up usually
runs at once on the sender's core, and the sender is counted in its system call meanwhile.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = "main() worker"  # how the benchmark's worker processes are started (bench/processes.py)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", default="W1")
    parser.add_argument("--runs", type=int, default=None, help="passed to agentflow bench --runs")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to wait after the workers start")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    command = [
        sys.executable,
        "-c",
        "from agentflow.cli import main; main()",
        "bench",
        "--workload",
        args.workload,
    ]
    if args.runs:
        command += ["--runs", str(args.runs)]
    out = Path(tempfile.mkdtemp(prefix="agentflow-profile-"))
    bench = subprocess.Popen(command, stdout=(out / "bench.log").open("w"), stderr=subprocess.STDOUT)
    workers = _wait_for_workers(bench)
    time.sleep(args.delay)
    targets = {f"worker {pid}": pid for pid in workers} | {"benchmark process": bench.pid}
    spies = {role: _record(pid, args.seconds, out / f"{pid}.txt") for role, pid in targets.items()}
    for spy in spies.values():
        spy.wait()
    bench.wait()
    print((out / "bench.log").read_text()[-3000:])
    for role, pid in targets.items():
        path = out / f"{pid}.txt"
        if path.exists():
            _report(role, path, args.top)


def _record(pid: int, seconds: float, path: Path) -> subprocess.Popen[bytes]:
    command = ["py-spy", "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "200"]
    command += ["--format", "raw", "--nonblocking", "-o", str(path)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_for_workers(bench: subprocess.Popen[bytes], timeout: float = 300.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and bench.poll() is None:
        found = subprocess.run(
            ["pgrep", "-f", re.escape(WORKER)], capture_output=True, text=True
        ).stdout.split()
        if found:
            return [int(pid) for pid in found]
        time.sleep(0.1)
    raise SystemExit("the benchmark started no worker process")


def _report(role: str, path: Path, top: int) -> None:
    own: collections.Counter[str] = collections.Counter()
    within: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = [_short(frame) for frame in stack.split(";")]
        own[frames[-1]] += n
        for frame in set(frames):
            within[frame] += n
    print(f"\n## {role}: {total} samples ({total / 200:.1f} s busy)")
    print("own time:")
    for frame, n in own.most_common(top):
        print(f"  {100 * n / total:5.1f}%  {frame}")
    print("including callees (engine code only):")
    engine = [(f, n) for f, n in within.most_common() if "agentflow/" in f or "asyncpg/" in f]
    for frame, n in engine[:top]:
        print(f"  {100 * n / total:5.1f}%  {frame}")


def _short(frame: str) -> str:
    frame = re.sub(r" \(.*?/(site-packages|src|lib/python3\.\d+)/", " (", frame)
    return re.sub(r":\d+\)$", ")", frame)


if __name__ == "__main__":
    main()
