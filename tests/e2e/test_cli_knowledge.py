"""`agentflow knowledge` as a person uses it: real processes on a test database."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.cli import cli_env, run_cli

CHURN = "Get-well plan for an account at risk of churn"
EXPANSION = "Expansion when an account reaches its license limits"
SAVE_DESK = """---
title: Save desk
tags: [cancellation request]
---
Route every cancellation request to the save desk.

## Steps

1. Log it in the save desk queue. (owner: Support Engineer; due: within 4 hours)
2. Call with a retention offer. (owner: Save Desk Lead; due: within 1 business day)
"""


def test_add_list_search_plan_and_errors(database_url: str, tmp_path: Path) -> None:
    env = cli_env(database_url)
    doc = tmp_path / "save_desk.md"
    doc.write_text(SAVE_DESK)
    plain = tmp_path / "escalation_matrix.txt"
    plain.write_text("Sev1 goes to the on-call lead at once; Sev2 within a business day.")
    added = run_cli(["knowledge", "add", str(doc), str(plain), "--tag", "save desk"], env)
    assert added.returncode == 0, added.stdout + added.stderr
    stored = r"stored “Save desk” \([0-9a-f-]{36}, 2 chunks, tags: save desk, cancellation request\)"
    assert re.search(stored, added.stdout), added.stdout
    assert "stored “escalation_matrix” (" in added.stdout, "no heading: the file name is the title"

    listed = run_cli(["knowledge", "list"], env)
    assert listed.returncode == 0, listed.stderr
    assert CHURN in listed.stdout and "Save desk" in listed.stdout and "operator" in listed.stdout

    found = run_cli(["knowledge", "search", "get well plan", "--limit", "2"], env)
    assert found.returncode == 0, found.stderr
    first = found.stdout.splitlines()[0]
    assert re.match(r"\d+\.\d{3}  " + re.escape(CHURN) + " › ", first), found.stdout

    planned = run_cli(["knowledge", "plan", "expansion"], env)
    assert planned.returncode == 0, planned.stderr
    assert f"“{EXPANSION}” (8 steps)" in planned.stdout
    assert "1. [CSM · within 2 business days] Check the numbers." in planned.stdout
    assert "Sources:" in planned.stdout and f"{EXPANSION} › Steps" in planned.stdout

    as_json = run_cli(["knowledge", "plan", "cancellation request", "--json"], env)
    assert as_json.returncode == 0, as_json.stderr
    plan = json.loads(as_json.stdout)
    assert plan["playbook"]["title"] == "Save desk"
    assert [(s["n"], s["owner"]) for s in plan["steps"]] == [(1, "Support Engineer"), (2, "Save Desk Lead")]

    empty = tmp_path / "empty.md"
    empty.write_text("   \n")
    refused = run_cli(["knowledge", "add", str(empty)], env)
    assert refused.returncode == 1 and "knowledge_invalid" in refused.stderr and "body" in refused.stderr
    assert "Traceback" not in refused.stderr
    missing = run_cli(["knowledge", "add", str(tmp_path / "nope.md")], env)
    assert missing.returncode == 2 and "file_unreadable" in missing.stderr
