"""A test session removes the data directory of its embedded PostgreSQL when it ends.

Runs a tiny pytest session (our fixtures, a real embedded server) in a subprocess whose
temporary directory is a fresh one, and looks at what it left there. Before the fix each
session left its ``agentflow-test-*`` folder (~60 MB) behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TINY = textwrap.dedent(
    """
    import os
    from pathlib import Path

    import asyncpg


    async def test_uses_the_database(pg_server, database_url):
        Path(os.environ["RECORD_TO"]).write_text(str(pg_server.pgdata))
        conn = await asyncpg.connect(database_url)
        try:
            assert await conn.fetchval("SELECT 1") == 1
        finally:
            await conn.close()
    """
)


def test_a_session_leaves_no_data_directory_behind(tmp_path: Path) -> None:
    # Not under tmp_path: pgserver opens the folders above its data directory to its own user
    # (o+rx), and any pytest session that starts meanwhile (CI runs three lanes) closes
    # /tmp/pytest-of-<user> again (0700), which cut the tiny session's server off its files.
    temp = Path(tempfile.mkdtemp(prefix="agentflow-cleanup-"))
    try:
        _check_the_session_in(temp, tmp_path)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _check_the_session_in(temp: Path, tmp_path: Path) -> None:
    (tmp_path / "test_tiny.py").write_text(TINY)
    record = tmp_path / "pgdata.txt"
    env = {k: v for k, v in os.environ.items() if k != "AGENTFLOW_TEST_DATABASE_URL"}
    env.update(TMPDIR=str(temp), RECORD_TO=str(record), PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "-p", "tests.conftest",
         "-q", "-p", "no:cacheprovider", "--no-cov", "--basetemp", str(tmp_path / "basetemp"), str(tmp_path / "test_tiny.py")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    pgdata = Path(record.read_text())
    assert pgdata.is_relative_to(temp), "the session's server did not live in its temporary directory"
    assert not pgdata.parent.exists(), f"left behind: {sorted(p.name for p in temp.iterdir())}"
    assert not [p for p in temp.iterdir() if p.name.startswith("agentflow-test-")]
