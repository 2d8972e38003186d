"""The CLI as a person uses it: real processes on a test database."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.cli import cli_env, run_cli


def test_demo_runs_every_workflow_to_completion(database_url: str) -> None:
    result = run_cli(["demo"], cli_env(database_url), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4/4 runs completed" in result.stdout
    assert "Dana: sends the renewal quote by Friday" in result.stdout  # a task row written by a step
    assert result.stdout.count("failed") >= 2, "the flaky CRM's failed attempts are in the timeline"


def test_apply_start_show_cancel_and_errors(database_url: str, tmp_path: Path) -> None:
    env = cli_env(database_url)
    good = tmp_path / "wf.yaml"
    good.write_text("name: cli-wf\nkind: structured\nnodes:\n  - {id: nap, type: wait, duration: 1h}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nkind: structured\nnodes:\n  - {id: a, type: tool}\n  - {id: b, type: warp}\n")
    applied = run_cli(["workflows", "apply", str(good)], env)
    assert applied.returncode == 0 and "published cli-wf (structured) version 1" in applied.stdout
    again = run_cli(["workflows", "apply", str(good)], env)
    assert "unchanged cli-wf" in again.stdout
    refused = run_cli(["workflows", "apply", str(bad)], env)
    assert refused.returncode == 1
    assert (
        "config_invalid" in refused.stderr
        and "nodes[0].tool" in refused.stderr
        and "nodes[1].type" in refused.stderr
    )
    assert "Traceback" not in refused.stderr
    started = run_cli(["runs", "start", "cli-wf", "--payload", json.dumps({"k": 1})], env)
    assert started.returncode == 0, started.stderr
    run_id = re.search(r"started run ([0-9a-f-]{36})", started.stdout)
    assert run_id is not None
    listed = run_cli(["runs", "list", "--workflow", "cli-wf"], env)
    assert run_id.group(1)[:8] in listed.stdout
    canceled = run_cli(["runs", "cancel", run_id.group(1)], env)
    assert canceled.returncode == 0 and "canceled" in canceled.stdout
    shown = run_cli(["runs", "show", run_id.group(1)], env)
    assert "canceled" in shown.stdout
    missing = run_cli(["runs", "show", "not-a-run"], env)
    assert missing.returncode == 1 and "run_not_found" in missing.stderr
    bad_json = run_cli(["runs", "start", "cli-wf", "--payload", "{oops"], env)
    assert bad_json.returncode == 2 and "invalid_json" in bad_json.stderr
    upgraded = run_cli(["db", "upgrade"], env)
    assert upgraded.returncode == 0 and "up to date" in upgraded.stdout
