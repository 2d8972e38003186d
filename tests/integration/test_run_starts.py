"""Starts in one round trip once a workflow's version is known, and never on a stale one."""

from __future__ import annotations

from typing import Any

import pytest

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.core.errors import ConfigError, ConflictError
from agentflow.engine import Engine
from agentflow.store.commit_groups import CommitGroup


def flow(name: str, tool: str = "echo", **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "nodes": [{"id": "a", "type": "tool", "tool": tool}], **extra}


STATEMENTS = ("fetchrow", "fetch", "fetchval", "execute", "fetchmany")


class Counting:
    """The pool, counting the statements a start sends (also on connections it hands out)."""

    def __init__(self, pool: Any) -> None:
        self.pool, self.statements = pool, 0

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.pool, name)
        if name == "acquire":
            return lambda *args, **kwargs: _CountingAcquire(self, real(*args, **kwargs))
        return _counted(self, real) if name in STATEMENTS else real

    async def release(self, conn: Any, **kwargs: Any) -> None:
        await self.pool.release(conn.conn if isinstance(conn, _CountingConnection) else conn, **kwargs)


class _CountingAcquire:
    def __init__(self, counting: Counting, acquiring: Any) -> None:
        self.counting, self.acquiring = counting, acquiring

    async def __aenter__(self) -> Any:
        return _CountingConnection(self.counting, await self.acquiring.__aenter__())

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.acquiring.__aexit__(*exc)

    def __await__(self) -> Any:  # ``await pool.acquire()``, as a commit group takes one
        return self._connection().__await__()

    async def _connection(self) -> _CountingConnection:
        return _CountingConnection(self.counting, await self.acquiring)


class _CountingConnection:
    def __init__(self, counting: Counting, conn: Any) -> None:
        self.counting, self.conn = counting, conn

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.conn, name)
        return _counted(self.counting, real) if name in STATEMENTS else real


def _counted(counting: Counting, real: Any) -> Any:
    async def counted(*args: Any, **kwargs: Any) -> Any:
        counting.statements += 1
        return await real(*args, **kwargs)

    return counted


async def test_a_known_workflow_starts_in_one_statement(engine: Engine, monkeypatch: Any) -> None:
    await engine.publish_workflow(flow("quick"))
    first = await engine.start_run("quick", {"n": 1})
    counting = Counting(engine.db.pool)
    monkeypatch.setattr(engine._starts, "_pool", counting)
    monkeypatch.setattr(engine._starts, "_starts", CommitGroup(counting))  # type: ignore[arg-type]
    second = await engine.start_run("quick", {"n": 2})
    assert counting.statements == 1
    assert (second.workflow_id, second.workflow_version, second.input) == (first.workflow_id, 1, {"n": 2})
    by_id = await engine.start_run(str(first.workflow_id))  # remembered apart from the name
    assert counting.statements == 3 and by_id.input == {}
    assert await engine.start_run(str(first.workflow_id)) is not None
    assert counting.statements == 4


async def test_a_new_version_is_started_on_at_once(engine: Engine) -> None:
    await engine.publish_workflow(flow("versions"))
    assert (await engine.start_run("versions")).workflow_version == 1
    await engine.publish_workflow(flow("versions", tool="add"))
    assert (await engine.start_run("versions")).workflow_version == 2
    assert (await engine.start_run("versions", version=1)).workflow_version == 1
    assert (await engine.start_run("versions", version=1)).workflow_version == 1


async def test_a_name_that_now_means_another_workflow_starts_that_one(engine: Engine) -> None:
    old = await engine.publish_workflow(flow("named"))
    await engine.start_run("named")
    await engine.db.pool.execute("UPDATE workflows SET name = 'renamed' WHERE id = $1", old.workflow.id)
    new = await engine.publish_workflow(flow("named"))
    assert new.workflow.id != old.workflow.id
    assert (await engine.start_run("named")).workflow_id == new.workflow.id


async def test_keys_and_checks_hold_on_the_quick_path(engine: Engine) -> None:
    await engine.publish_workflow(flow("checked", payload_format={"n": "number"}))
    await engine.start_run("checked", {"n": 1})  # remembered from here
    with pytest.raises(ConfigError) as bad:
        await engine.start_run("checked", {"n": "one"})
    assert bad.value.code == "payload_invalid"
    first = await engine.start_run_once("checked", {"n": 2}, idempotency_key="k-1")
    again = await engine.start_run_once("checked", {"n": 2}, idempotency_key="k-1")
    assert (again.replayed, again.run.id) == (True, first.run.id) and not first.replayed
    with pytest.raises(ConflictError) as reused:
        await engine.start_run_once("checked", {"n": 3}, idempotency_key="k-1")
    assert reused.value.code == "idempotency_key_reused"
    await engine.start_run("checked", {"n": 4}, enrollment_key="acct-1")
    with pytest.raises(ConflictError) as active:
        await engine.start_run("checked", {"n": 5}, enrollment_key="acct-1")
    assert active.value.code == "run_already_active"
    rows = await engine.db.pool.fetch("SELECT input FROM runs ORDER BY created_at")
    assert [r["input"]["n"] for r in rows] == [1, 2, 4]
