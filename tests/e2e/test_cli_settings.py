"""A process started with a bad ``AGENTFLOW_*`` setting stops at once with one line per bad
variable naming it, why, and what it got unless it may hold a secret (exit 2): never a
traceback. An empty
``AGENTFLOW_DATABASE_URL`` means unset (the embedded server), as an empty variable usually does."""

from __future__ import annotations

import os

from agentflow.settings import Settings
from tests.support.cli import run_cli


def test_bad_settings_stop_the_cli_with_one_line_each() -> None:
    env = {**os.environ, "AGENTFLOW_POOL_MIN_SIZE": "0", "AGENTFLOW_DATABASE_URL": "localhost:5432/app"}
    result = run_cli(["nodes", "list"], env, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert "error: AGENTFLOW_POOL_MIN_SIZE: Input should be greater than or equal to 1 (got '0')" in lines
    [url] = [line for line in lines if line.startswith("error: AGENTFLOW_DATABASE_URL:")]
    assert "must be a PostgreSQL URL such as postgresql://" in url
    assert "localhost:5432/app" not in url  # a URL may hold a password: never echoed
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_an_empty_database_url_means_the_embedded_server() -> None:
    assert Settings(database_url="").database_url is None
    assert Settings(database_url="  ").database_url is None
    assert Settings(database_url="postgres://u@h/db").database_url == "postgres://u@h/db"
    env = {**os.environ, "AGENTFLOW_DATABASE_URL": ""}
    result = run_cli(["nodes", "list"], env, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
