"""The workers' cache of parsed configs: a missing version is a clear error, and a full cache
makes room (its size bounds the memory a worker spends on configs)."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from agentflow.core.errors import NotFoundError
from agentflow.engine import DEFAULT_WORKSPACE, Engine
from agentflow.runtime.configs import ConfigCache


def flow(name: str) -> dict[str, object]:
    return {"name": name, "kind": "structured", "nodes": [{"id": "done", "type": "finish"}]}


async def test_a_missing_version_is_version_not_found(engine: Engine) -> None:
    with pytest.raises(NotFoundError) as info:
        await ConfigCache(engine.db.pool).get(DEFAULT_WORKSPACE, uuid.uuid4(), 1)
    assert info.value.code == "version_not_found"


async def test_a_full_cache_forgets_its_oldest_config(engine: Engine) -> None:
    cache = ConfigCache(engine.db.pool, size=1)
    first = (await engine.publish_workflow(flow("first"))).workflow
    second = (await engine.publish_workflow(flow("second"))).workflow
    assert (await cache.get(DEFAULT_WORKSPACE, first.id, 1)).name == "first"
    assert (await cache.get(DEFAULT_WORKSPACE, second.id, 1)).name == "second"
    assert list(cache._items) == [(DEFAULT_WORKSPACE, second.id, 1)]


async def test_whether_a_version_needs_code_is_found_once_and_bounded(engine: Engine) -> None:
    cache = ConfigCache(engine.db.pool, size=1)
    first = (await engine.publish_workflow(flow("first"))).workflow
    second = (await engine.publish_workflow(flow("second"))).workflow
    plain = await engine.get_version(first.id, 1)
    assert cache.needs_code(plain) is False
    # Versions never change, so the answer is kept: the same version asked again is not read
    # again (a record whose config changed under it shows it).
    coded = replace(plain, config={"nodes": [{"id": "c", "type": "run_code"}]})
    assert cache.needs_code(coded) is False
    other = replace(await engine.get_version(second.id, 1), config=coded.config)
    assert cache.needs_code(other) is True
    assert list(cache._code) == [(DEFAULT_WORKSPACE, second.id, 1)]  # the oldest made room
