"""The CLI as a person uses it: real processes on a test database."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.cli import cli_env, run_cli


def test_demo_runs_the_agent_workflows_end_to_end(database_url: str) -> None:
    result = run_cli(["demo"], cli_env(database_url), timeout=180)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "scripted provider (no model configured" in out
    assert out.count("✓") == 5 and "✗" not in out, out
    assert "New task for you: Send the SSO setup" in out  # the assignment email, through SMTP
    assert "Due soon: Send the SSO setup guide" in out  # the time-compressed reminder
    assert "Pricing concern from Acme Corp" in out
    assert "All 2 tasks are done" in out  # the completions re-triggered the run until it completed
    assert "plan: 8 steps, citing Get-well plan" in out
    assert "What has this agent done for me?" in out and "Meetings analysed 1" in out


def test_budget_and_approvals_commands(database_url: str) -> None:
    env = cli_env(database_url)
    set_ = run_cli(["budget", "set", "--usd", "3.5", "--tokens", "1000"], env)
    assert set_.returncode == 0 and "$3.50 / 1,000 tokens" in set_.stdout, set_.stderr
    shown = run_cli(["budget", "show"], env)
    assert "$3.50" in shown.stdout and "0 model calls" in shown.stdout
    listed = run_cli(["approvals", "list", "--status", "all"], env)
    assert listed.returncode == 0 and "approval" in listed.stdout
    bad = run_cli(["approvals", "approve", "not-an-id"], env)
    assert bad.returncode == 2 and "not an approval id" in bad.stderr
    missing = run_cli(["approvals", "approve", "00000000-0000-0000-0000-000000000009"], env)
    assert (
        missing.returncode == 1
        and "approval_not_found" in missing.stderr
        and "Traceback" not in missing.stderr
    )
    unknown = run_cli(["approvals", "list", "--status", "maybe"], env)
    assert unknown.returncode == 1 and "status_invalid" in unknown.stderr


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


def test_people_commands_set_list_and_remove(database_url: str) -> None:
    env = cli_env(database_url)
    saved = run_cli(
        ["people", "set", "lee", "--email", "lee@example.com", "--role", "finance", "--role", "ops"], env
    )
    assert saved.returncode == 0, saved.stderr
    assert "person lee saved: roles finance, ops" in saved.stdout
    listed = run_cli(["people", "list", "--role", "finance"], env)
    assert listed.returncode == 0 and "lee@example.com" in listed.stdout
    bad = run_cli(["people", "set", "Lee!", "--email", "nope"], env)
    assert bad.returncode != 0 and "person_invalid" in bad.stdout + bad.stderr
    removed = run_cli(["people", "delete", "lee"], env)
    again = run_cli(["people", "delete", "lee"], env)
    assert (
        removed.returncode == 0
        and again.returncode != 0
        and "person_not_found" in again.stdout + again.stderr
    )
