"""The container image and the compose file, run by a real Docker engine (issue 16).

The image is built once from the repository's Dockerfile, on the official Python image or,
where Docker Hub cannot be reached, on a stand-in built from Debian's packages
(``tests/support/container_base.py``). It runs the demo on its embedded database as its
non-root user; and ``deploy/compose.yaml``, as a user runs it (its PostgreSQL, the one-shot
migration, the API and two workers), serves the API, passes the image's health check, creates
the first key with ``run --rm migrate``, its workers run a workflow, and its API and workers
stop cleanly on SIGTERM as their containers' process 1.

Both need a Docker engine (``docker info``), the compose test ``docker compose`` too; where
either is missing the test says so and does not run.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.container_base import postgres_image, python_base
from tests.support.pg_cluster import free_port

REPO = Path(__file__).resolve().parents[2]


def answers(*command: str) -> bool:
    """Whether ``command`` runs and succeeds here (a Docker client alone does not build images)."""
    if shutil.which(command[0]) is None:
        return False
    try:
        return subprocess.run(command, capture_output=True, timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        return False


ENGINE = answers("docker", "info")
needs_engine = pytest.mark.skipif(not ENGINE, reason="needs a Docker engine; this machine has none")


def images(*filters: str) -> list[str]:
    """The ids of the engine's images that match ``filters``."""
    listed = subprocess.run(["docker", "images", "-q", *filters], capture_output=True, text=True, timeout=60)
    return listed.stdout.split()


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    """The repository's image, built once for this module; removed after it."""
    tag = f"agentflow-test:{secrets.token_hex(4)}"
    base = python_base()
    dangling = set(images("--filter", "dangling=true"))
    built = subprocess.run(
        ["docker", "build", "--build-arg", f"PYTHON_IMAGE={base}", "-t", tag, str(REPO)],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    try:
        assert built.returncode == 0, built.stderr[-3000:]
        yield tag
    finally:
        # The tag and the untagged image of the build's first stage; nobody else's images.
        stage = [i for i in images("--filter", "dangling=true") if i not in dangling]
        subprocess.run(["docker", "image", "rm", "-f", tag, *stage], capture_output=True, timeout=120)


@pytest.mark.timeout(1800)
@needs_engine
def test_the_image_builds_and_runs_the_demo_as_its_own_user(image: str) -> None:
    user = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "id", image, "-u"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert user.stdout.strip() == "10001", user.stdout + user.stderr
    demo = subprocess.run(
        ["docker", "run", "--rm", image, "demo"], capture_output=True, text=True, timeout=600
    )
    assert demo.returncode == 0, (demo.stdout + demo.stderr)[-3000:]
    assert "What has this agent done for me?" in demo.stdout


class Compose:
    """``docker compose`` on ``deploy/compose.yaml`` as its own project, with an override."""

    def __init__(self, override: Path, env: dict[str, str]) -> None:
        self.project = f"agentflow-test-{secrets.token_hex(3)}"
        self.files = ["-f", str(REPO / "deploy" / "compose.yaml"), "-f", str(override)]
        self.env = env

    def __call__(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        command = ["docker", "compose", "-p", self.project, *self.files, *args]
        return subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=timeout)

    def container(self, service: str) -> str:
        return f"{self.project}-{service}-1"


@pytest.fixture
def compose(image: str, tmp_path: Path) -> Iterator[tuple[Compose, int]]:
    """The compose file brought up with this module's image and a free local port for the API."""
    port = free_port()
    override = tmp_path / "override.yaml"
    # The repository's image instead of a build (the test above builds it); the API on a port
    # of this machine that nothing else holds, instead of 8000.
    override.write_text(
        "services:\n"
        f"  postgres: {{image: {postgres_image()}}}\n"
        f"  migrate: {{image: {image}}}\n"
        f'  api: {{image: {image}, ports: !override ["127.0.0.1:{port}:8000"]}}\n'
        f"  worker: {{image: {image}}}\n"
    )
    secret = base64.b64encode(secrets.token_bytes(32)).decode()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTFLOW_")}
    project = Compose(override, {**env, "AGENTFLOW_SECRET_KEY": secret})
    try:
        up = project("up", "-d", "--no-build")
        assert up.returncode == 0, up.stderr[-3000:]
        yield project, port
    finally:
        logs = project("logs", "--no-color", "--tail", "40")
        print(logs.stdout[-6000:])  # shown when the test fails
        project("down", "-v", "--timeout", "20")


@pytest.mark.timeout(1800)
@needs_engine
@pytest.mark.skipif(ENGINE and not answers("docker", "compose", "version"), reason="needs docker compose")
def test_the_compose_file_runs_postgres_the_migration_the_api_and_two_workers(
    compose: tuple[Compose, int],
) -> None:
    project, port = compose
    deadline = time.monotonic() + 180
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as api:
        while True:
            try:
                if api.get("/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the API never became ready"
            time.sleep(0.5)
        migrated = inspect(project.container("migrate"), "{{.State.Status}} {{.State.ExitCode}}")
        assert migrated.split() == ["exited", "0"], "the one-shot migration ran and succeeded"
        ps = project("ps", "--services", "--status", "running")
        assert sorted(ps.stdout.split()) == ["api", "postgres", "worker"], ps.stdout + ps.stderr
        workers = project("ps", "-q", "worker")
        assert len(workers.stdout.split()) == 2, "two worker replicas"
        assert api.get("/api/ai/workflows").status_code == 401, "AGENTFLOW_API_AUTH=required holds"

        key = project("run", "--rm", "migrate", "keys", "create", "admin")
        assert key.returncode == 0, key.stderr[-3000:]
        auth = {"Authorization": f"Bearer {key.stdout.strip().splitlines()[-1]}"}
        flow = {
            "name": "hello",
            "kind": "structured",
            "nodes": [{"id": "done", "type": "finish", "output": "hi"}],
        }
        assert api.post("/api/ai/workflows", json=flow, headers=auth).status_code in (200, 201)
        runs = [
            api.post("/api/ai/workflows/hello/runs", json={"payload": {}}, headers=auth) for _ in range(6)
        ]
        assert [r.status_code for r in runs] == [201] * 6, runs[0].text
        for started in runs:
            run = started.json()
            while run["status"] != "completed":
                assert time.monotonic() < deadline, run
                time.sleep(0.2)
                run = api.get(f"/api/ai/workflows/hello/runs/{run['id']}", headers=auth).json()
            assert run["output"] == "hi", "a worker ran it"

    while (health := inspect(project.container("api"), "{{.State.Health.Status}}")) != "healthy":
        assert health == "starting" and time.monotonic() < deadline, f"the API's health check: {health}"
        time.sleep(1)
    # SIGTERM, as the engine stops a container: the API and the workers (each its container's
    # process 1) stop cleanly well within compose's 10 s, not killed after it.
    stopped = project("stop", "api", "worker")
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    states = project("ps", "-a", "--format", "{{.Service}} {{.State}} {{.ExitCode}}", "api", "worker")
    assert sorted(states.stdout.splitlines()) == ["api exited 0", "worker exited 0", "worker exited 0"]


def inspect(container: str, template: str) -> str:
    """What ``docker inspect`` says of ``container`` through the Go ``template``."""
    inspected = subprocess.run(
        ["docker", "inspect", "-f", template, container], capture_output=True, text=True, timeout=60
    )
    return inspected.stdout.strip()
