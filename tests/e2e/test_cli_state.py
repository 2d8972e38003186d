"""``agentflow runs start --state`` and the variables ``runs show`` prints, in real processes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.cli import cli_env, run_cli

CONFIG = """\
name: cli-state
kind: structured
state_definition:
  attempts: {type: number, default: 0}
  owner: string
nodes:
  - {id: nap, type: wait, duration: 1h}
"""


def test_start_with_state_show_it_and_refuse_a_bad_one(database_url: str, tmp_path: Path) -> None:
    env = cli_env(database_url)
    path = tmp_path / "wf.yaml"
    path.write_text(CONFIG)
    assert run_cli(["workflows", "apply", str(path)], env).returncode == 0
    started = run_cli(["runs", "start", "cli-state", "--state", json.dumps({"owner": "dana"})], env)
    assert started.returncode == 0, started.stderr
    run_id = re.search(r"started run ([0-9a-f-]{36})", started.stdout)
    assert run_id is not None
    shown = run_cli(["runs", "show", run_id.group(1)], env)
    line = next(line for line in shown.stdout.splitlines() if line.startswith("state "))
    assert json.loads(line.removeprefix("state ")) == {"attempts": 0, "owner": "dana"}
    refused = run_cli(["runs", "start", "cli-state", "--state", json.dumps({"attempts": "x", "who": 1})], env)
    assert refused.returncode == 1 and "state_invalid" in refused.stderr
    assert (
        "state.attempts: must be a number" in refused.stderr and "state.who: not declared" in refused.stderr
    )
    assert "Traceback" not in refused.stderr
