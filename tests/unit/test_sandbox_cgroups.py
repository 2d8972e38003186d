"""Finding where a worker may make control groups for code (``sandbox.cgroups``): under its own
group of each hierarchy, v1 or v2, as root only; and the verdict on an execution the kernel
killed at its group's memory limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentflow.integrations.sandbox import cgroups
from agentflow.integrations.sandbox.outcome import Ending, Verdict, judge

V1_MOUNTS = """cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
V1_OWN = "8:pids:/\n4:memory:/job/42\n0::/\n"


@pytest.fixture
def root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroups.os, "geteuid", lambda: 0)


def write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


def test_v1_groups_go_under_the_workers_own_memory_and_pids_groups(tmp_path: Path, root: None) -> None:
    found = cgroups.find_hierarchy(write(tmp_path, "mounts", V1_MOUNTS), write(tmp_path, "own", V1_OWN))
    assert found == cgroups.Hierarchy(
        False, Path("/sys/fs/cgroup/memory/job/42"), Path("/sys/fs/cgroup/pids")
    )
    assert found.roots() == [found.memory, found.pids]


def test_v2_delegates_memory_and_pids_to_the_groups_children(tmp_path: Path, root: None) -> None:
    group = tmp_path / "fs" / "worker.slice"
    group.mkdir(parents=True)
    (group / "cgroup.controllers").write_text("cpu io memory pids\n")
    (group / "cgroup.subtree_control").write_text("cpu\n")
    mounts = write(tmp_path, "mounts", f"cgroup2 {tmp_path / 'fs'} cgroup2 rw 0 0\n")
    found = cgroups.find_hierarchy(mounts, write(tmp_path, "own", "0::/worker.slice\n"))
    assert found == cgroups.Hierarchy(True, group, group) and found.roots() == [group]
    assert (group / "cgroup.subtree_control").read_text() == "+memory +pids"


def test_no_groups_without_root_or_without_both_controllers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mounts, own = write(tmp_path, "mounts", V1_MOUNTS), write(tmp_path, "own", V1_OWN)
    monkeypatch.setattr(cgroups.os, "geteuid", lambda: 1000)
    assert cgroups.find_hierarchy(mounts, own) is None
    monkeypatch.setattr(cgroups.os, "geteuid", lambda: 0)
    memory_only = write(tmp_path, "memory-only", V1_MOUNTS.splitlines()[0] + "\n")
    assert cgroups.find_hierarchy(memory_only, own) is None
    v2_without_memory = tmp_path / "v2"
    v2_without_memory.mkdir()
    (v2_without_memory / "cgroup.controllers").write_text("cpu pids\n")
    (v2_without_memory / "cgroup.subtree_control").write_text("")
    v2 = write(tmp_path, "v2-mounts", f"cgroup2 {v2_without_memory} cgroup2 rw 0 0\n")
    assert cgroups.find_hierarchy(v2, write(tmp_path, "v2-own", "0::/\n")) is None
    assert cgroups.find_hierarchy(str(tmp_path / "missing"), own) is None


def ending(returncode: int, oom_killed: bool) -> Ending:
    return Ending(returncode, [], b"", b"", None, False, 0.5, oom_killed=oom_killed)


def test_an_execution_killed_at_its_groups_memory_limit_is_a_memory_verdict() -> None:
    assert judge(ending(-9, True)).verdict is Verdict.MEMORY
    assert judge(ending(1, True)).verdict is Verdict.MEMORY  # a child was killed; main gave up
    assert judge(ending(-9, False)).verdict is Verdict.FAILED
    assert judge(ending(0, True), expect_result=False).verdict is Verdict.OK  # main coped
