"""`agentflow bench --quick` end to end: every workload runs and reports numbers (no timing asserts)."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import CLI, ROOT

WORKLOADS = {"W1", "W2", "W3", "W4", "G1", "W5", "E1", "E2", "E3", "A1", "L1", "P1", "S1"}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quick_bench_reports_every_workload_and_the_floor(tmp_path: Path, server_dir: Path) -> None:
    out = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if k != "AGENTFLOW_DATABASE_URL"}
    env.update(AGENTFLOW_DATA_DIR=str(server_dir / "data"), COLUMNS="200")
    result = subprocess.run(
        [*CLI, "bench", "--quick", "--json", str(out)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=290,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "W1" in result.stdout and "floor" in result.stdout
    report = json.loads(out.read_text())

    floor = report["floor"]
    for key in ("commit_p50_ms", "commit_p99_ms", "commits_per_s", "select1_p50_ms"):
        assert _positive(floor[key]), (key, floor[key])
    assert set(floor["paced_commit_p50_ms"]) == {"25", "100", "300"}, floor
    assert all(_positive(p50) for p50 in floor["paced_commit_p50_ms"].values()), floor
    assert report["machine"]["cpu_count"] >= 1
    assert report["machine"]["postgres"]["server_version"]
    assert report["settings"]["quick"] is True

    workloads = report["workloads"]
    assert set(workloads) == WORKLOADS, "--quick runs W1-W4, G1, W5, E1-E3, A1, L1, P1 and S1 (not W4-10k)"
    for key, workload in workloads.items():
        assert workload["error"] is None, (key, workload["error"])
        assert workload["metrics"], key
        for metric in workload["metrics"]:
            assert isinstance(metric["value"], int | float), (key, metric)
            assert _positive(metric["value"]), (key, metric)
            if metric["floor_ratio"] is not None:
                assert _positive(metric["floor_ratio"]), (key, metric)
            if metric["target"] is not None:
                assert isinstance(metric["passed"], bool), (key, metric)
    for key, cpu_us in (("W2", 100), ("G1", 100), ("L1", 300), ("A1", 300)):
        names = [metric["name"] for metric in workloads[key]["metrics"]]
        assert f"floor: INSERT+COMMIT p50 after {cpu_us} µs of CPU, just before" in names, (key, names)
    assert 0 < workloads["W2"]["details"]["worker_cpu_ms_per_step"] < 1_000, workloads["W2"]["details"]
    statuses = workloads["W1"]["details"]["execution_statuses"]
    assert statuses == {"completed": workloads["W1"]["details"]["runs"]}
    # One by one a run took about 4 (a begin, 3 checkpoints, its share of a claim); grouped, a
    # fraction of one.
    writes, runs = (
        workloads["W1"]["details"]["execution_write_transactions"],
        workloads["W1"]["details"]["runs"],
    )
    assert 0 < writes < 2 * runs, (writes, runs)
    _check_event_workloads(workloads)
    _check_agent_workload(workloads["A1"]["details"])
    llm = workloads["L1"]["details"]
    assert llm["steps_with_tokens"] == llm["runs"] * llm["nodes"], "every llm node recorded its tokens"
    prune = workloads["P1"]["details"]  # each pass deleted exactly the old runs (it checks)
    assert [p["kept_step_rows"] for p in prune["passes"]] == [
        k * prune["steps_per_run"] for k in prune["kept_runs"]
    ]
    idle = workloads["W3"]["details"]["idle_commit_ms"]  # the commit after W3's idle gap
    assert idle["n"] > 0 and _positive(idle["p50"]), idle
    search = workloads["S1"]["details"]
    assert search["stored"] == search["runs"]
    common = (
        "none (the newest page)",
        "status=failed",
        "version",
        "model",
        "state.tier",
        "ended lt (older than 60 days)",
    )
    assert all(search["full_pages"][name] == search["repeats"] for name in common), search["full_pages"]
    written = workloads["G1"]["details"]["bytes"]
    assert set(written) == {"linear 10 nodes", "linear 20 nodes", "linear 40 nodes",
                            "diamond 8 nodes", "diamond 20 nodes", "diamond 38 nodes",
                            "mixed 10 nodes", "mixed 20 nodes", "mixed 40 nodes"}  # fmt: skip
    # Commits per node: every call alone; a diamond's two calls share one (they end together)
    # and its join rides with the next call; a mixed flow's conditions and mappings with the
    # call after them (and its last one alone).
    assert workloads["G1"]["details"]["commits_per_node"] == {"linear": 1.0, "diamond": 0.4, "mixed": 0.4}


def _check_event_workloads(workloads: dict[str, Any]) -> None:
    """Counts, not timings: every event stored once, decided, and every run's first step seen."""
    ingest = workloads["E1"]["details"]
    assert set(ingest["phases"]) == {"http_single", "http_batch", "python_single", "python_batch"}
    for key, phase in ingest["phases"].items():
        assert phase["events"] > 0, key
        assert phase["stored"] == phase["created"] == phase["events"], (key, phase)
    assert ingest["all_stored"] is True
    assert ingest["phases"]["http_batch"]["events"] == 500 * ingest["phases"]["http_batch"]["requests"]

    latency = workloads["E2"]["details"]
    assert latency["events"] > 0
    assert latency["decisions"] == {"started": latency["events"]}, "each event started one run"
    assert latency["samples"] == latency["runs_started"] == latency["events"], "a first step per run"
    warm = latency["events"] - latency["cold_events"]
    assert latency["event_to_step_after_cold_ms"]["n"] == warm > 0, (
        "the first events after the start left out"
    )
    assert latency["eager_event_to_step_after_cold_ms"]["n"] == warm

    dispatch = workloads["E3"]["details"]
    events, workflows = dispatch["events"], dispatch["workflows"]
    assert workflows == 100 and events > 0
    assert dispatch["decisions_before_release"] == 0, "the hold kept the events from the dispatcher"
    assert dispatch["events_decided"] == events
    assert dispatch["decision_pairs"] == events * workflows, "every event decided at every workflow"
    started = dispatch["events_expected_to_match"]
    assert 0 < started < events
    assert dispatch["decisions"] == {"started": started, "not_matched": events * workflows - started}
    assert dispatch["events_started"] == started
    assert sum(batch["events"] for batch in dispatch["batches"]) == events
    assert dispatch["run_statuses"] == {"completed": started}


def _check_agent_workload(agent: dict[str, Any]) -> None:
    """Counts, not timings: every agent run took its four steps and created its task."""
    runs = agent["runs"]
    assert runs > 0 and agent["steps_per_run"] == 4
    for phase in ("all_at_once", "one_at_a_time"):
        assert agent["step_shapes"][phase] == {"decide>create_task>decide>complete": runs}, phase
        assert agent["tasks_created"][phase] == runs, phase
        assert all(timing["gap_ms"]["n"] == runs for timing in agent[phase].values()), phase
    assert agent["execution_statuses"] == agent["serial_statuses"] == {"completed": runs}


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def test_unknown_workload_is_refused() -> None:
    result = subprocess.run(
        [*CLI, "bench", "--workload", "W9"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "unknown workload 'W9'" in result.stderr
