"""The container image (issue 16). Without a Docker engine: the Dockerfile's final stage runs
the wheel as a non-root user with a health check, and what it installs, the wheel alone, does
what ``deploy/compose.yaml`` asks of it: outside the source tree, with the compose file's
settings, it migrates the schema, serves the API and the console, creates the first key, and a
worker runs a workflow; the image's own health check passes against it and both processes stop
cleanly on SIGTERM.

With a Docker engine, ``test_container_engine.py`` builds the image and runs it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.container_base import OFFICIAL
from tests.support.pg_cluster import free_port

REPO = Path(__file__).resolve().parents[2]
MAIN = "from agentflow.cli import main; main()"


def final_stage() -> dict[str, str]:
    """The instructions of the Dockerfile's last stage (continuations joined; last one wins)."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    stages = re.split(r"^FROM .*$", text, flags=re.MULTILINE)
    found: dict[str, str] = {}
    for line in stages[-1].splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            found[word.upper()] = " ".join(rest.split())
    return found


def compose() -> dict[str, object]:
    loaded: dict[str, object] = yaml.safe_load((REPO / "deploy" / "compose.yaml").read_text())
    return loaded


def test_the_image_runs_the_wheel_unprivileged_with_a_health_check_and_the_compose_file_fits() -> None:
    stage = final_stage()
    text = (REPO / "Dockerfile").read_text()
    assert f"ARG PYTHON_IMAGE={OFFICIAL}\n" in text, "the official Python image is the default base"
    assert re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE) == ["${PYTHON_IMAGE}"] * 2
    assert stage["USER"] == "10001", "the image runs as a non-root user"
    assert "pip install --no-cache-dir /wheels/*.whl" in stage["RUN"], "only the wheel is installed"
    assert "COPY" in stage and "src" not in stage["COPY"], "no source tree in the final image"
    assert json.loads(stage["ENTRYPOINT"]) == ["agentflow"]
    assert json.loads(stage["CMD"]) == ["serve", "--no-worker"]
    health = stage["HEALTHCHECK"]
    assert health.startswith("--interval=") and "CMD [" in health
    assert set((REPO / ".dockerignore").read_text().split()) >= {
        "*",
        "!pyproject.toml",
        "!README.md",
        "!src/",
    }
    services = compose()["services"]
    assert isinstance(services, dict)
    assert services["api"]["command"] == ["serve", "--no-worker"]
    assert services["worker"]["command"] == ["worker"]
    assert services["migrate"]["command"] == ["db", "upgrade"]
    for name in ("api", "worker", "migrate"):
        assert services[name]["environment"]["AGENTFLOW_DATABASE_URL"].startswith("postgresql://")
    assert services["api"]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}


@pytest.fixture
def wheel_site(tmp_path: Path) -> Path:
    """The wheel, built as the Dockerfile builds it, installed alone into a directory."""
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)],
        check=True, timeout=300, capture_output=True,
    )  # fmt: skip
    (wheel,) = wheels.glob("agentflow-*.whl")
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True, timeout=300, capture_output=True,
    )  # fmt: skip
    return site


def image_env(site: Path, database_url: str, port: int) -> dict[str, str]:
    """The compose file's environment for the API and workers, on this machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTFLOW_", "COVERAGE_"))}
    env.update({k: str(v) for k, v in compose()["x-agentflow"]["environment"].items()})  # type: ignore[index]
    env.update(
        AGENTFLOW_DATABASE_URL=database_url,
        AGENTFLOW_SECRET_KEY=base64.b64encode(secrets.token_bytes(32)).decode(),
        AGENTFLOW_HOST="127.0.0.1",  # the image's 0.0.0.0, on a shared machine
        AGENTFLOW_PORT=str(port),
        AGENTFLOW_PUBLIC_URL=f"http://127.0.0.1:{port}",
        AGENTFLOW_POLL_INTERVAL="0.2",
        PYTHONPATH=str(site),
    )
    return env


def agentflow(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", MAIN, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.timeout(420)
def test_the_wheel_alone_migrates_serves_and_works_with_the_compose_settings(
    wheel_site: Path, database_url: str, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    port = free_port()
    env = image_env(wheel_site, database_url, port)
    home = tmp_path / "home"
    home.mkdir()
    where = subprocess.run(
        [sys.executable, "-c", "import agentflow; print(agentflow.__file__)"],
        env=env, cwd=home, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert where.stdout.startswith(str(wheel_site)), "the wheel's copy runs, not the source tree"
    migrated = agentflow(env, home, "db", "upgrade")
    assert migrated.returncode == 0, migrated.stderr
    key = agentflow(env, home, "keys", "create", "admin")
    assert key.returncode == 0, key.stderr
    token = key.stdout.strip().splitlines()[-1]
    for args in (["serve", "--no-worker"], ["worker"]):
        processes.append(
            subprocess.Popen(
                [sys.executable, "-c", MAIN, *args],
                env=env,
                cwd=home,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    health = json.loads(final_stage()["HEALTHCHECK"].split(" CMD ", 1)[1])
    deadline = time.monotonic() + 90
    while subprocess.run(health, env=env, capture_output=True, timeout=10).returncode != 0:
        assert processes[0].poll() is None, processes[0].communicate()[0][-3000:]
        assert time.monotonic() < deadline, f"the health check never passed: {shlex.join(health)}"
        time.sleep(0.25)
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, timeout=30) as api:
        assert api.get("/readyz").status_code == 200
        assert api.get("/console/app.js").status_code == 200, "the console ships in the wheel"
        assert api.get("/api/ai/workflows").status_code == 401, "AGENTFLOW_API_AUTH=required holds"
        flow = {
            "name": "hello",
            "kind": "structured",
            "nodes": [{"id": "done", "type": "finish", "output": "hi"}],
        }
        assert api.post("/api/ai/workflows", json=flow, headers=auth).status_code in (200, 201)
        started = api.post("/api/ai/workflows/hello/runs", json={"payload": {}}, headers=auth)
        assert started.status_code == 201, started.text
        run = started.json()
        while run["status"] != "completed":
            assert time.monotonic() < deadline + 60, run
            time.sleep(0.2)
            run = api.get(f"/api/ai/workflows/hello/runs/{run['id']}", headers=auth).json()
    assert run["output"] == "hi", "the worker ran it"
    for proc in processes:
        proc.send_signal(signal.SIGTERM)
    for proc in processes:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out[-3000:]
