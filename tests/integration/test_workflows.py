"""Publishing: versions by content hash, flags, pinning, kind changes, validation errors."""

from __future__ import annotations

import pytest

from agentflow.core.errors import ConfigError, ConflictError, NotFoundError
from agentflow.engine import Engine

BASE = {"name": "pub", "kind": "structured", "nodes": [{"id": "a", "type": "finish", "output": 1}]}


async def test_publish_creates_versions_only_when_content_changes(engine: Engine) -> None:
    first = await engine.publish_workflow(BASE)
    assert first.created and first.version.version == 1 and first.workflow.latest_version == 1
    same = await engine.publish_workflow(
        "name: pub\nkind: structured\nnodes: [{type: finish, id: a, output: 1}]"
    )
    assert not same.created and same.version.version == 1
    assert same.version.content_hash == first.version.content_hash
    changed = await engine.publish_workflow({**BASE, "description": "now documented"})
    assert changed.created and changed.version.version == 2 and changed.workflow.latest_version == 2
    reverted = await engine.publish_workflow(BASE)
    assert reverted.created and reverted.version.version == 3, "reverting is a new version, not a rewind"
    v1 = await engine.get_version("pub", 1)
    assert v1.config["nodes"] == [{"id": "a", "type": "finish", "output": 1}]
    assert (await engine.get_version(first.workflow.id)).version == 3
    with pytest.raises(NotFoundError):
        await engine.get_version("pub", 9)


async def test_flags_and_pinned_starts(engine: Engine) -> None:
    published = await engine.publish_workflow(BASE, draft=True)
    assert published.workflow.draft and published.workflow.enabled
    await engine.publish_workflow({**BASE, "description": "v2"})
    wf = await engine.get_workflow("pub")
    assert wf.draft, "publishing without flags keeps them"
    wf = await engine.set_flags("pub", draft=False, enabled=False)
    assert (wf.draft, wf.enabled) == (False, False)
    pinned = await engine.start_run("pub", version=1)
    latest = await engine.start_run(wf.id)
    assert (pinned.workflow_version, latest.workflow_version) == (1, 2)
    assert [w.name for w in await engine.list_workflows()] == ["pub"]


async def test_kind_cannot_change_and_invalid_configs_store_nothing(engine: Engine) -> None:
    await engine.publish_workflow(BASE)
    with pytest.raises(ConflictError) as info:
        await engine.publish_workflow({"name": "pub", "kind": "agent", "prompt": "x"})
    assert info.value.code == "workflow_kind_mismatch"
    with pytest.raises(ConfigError) as bad:
        await engine.publish_workflow(
            {"name": "broken", "kind": "structured", "nodes": [{"id": "a", "type": "wait"}]}
        )
    assert bad.value.info.details["errors"][0]["path"] == "nodes[0]"
    with pytest.raises(NotFoundError):
        await engine.get_workflow("broken")
    assert (await engine.get_workflow("pub")).latest_version == 1


async def test_enrollment_key_allows_one_active_run(engine: Engine) -> None:
    await engine.publish_workflow(
        {"name": "once", "kind": "structured", "nodes": [{"id": "w", "type": "wait", "duration": "1h"}]}
    )
    first = await engine.start_run("once", enrollment_key="account:42")
    with pytest.raises(ConflictError) as info:
        await engine.start_run("once", enrollment_key="account:42")
    assert info.value.code == "run_already_active"
    other = await engine.start_run("once", enrollment_key="account:43")
    await engine.cancel_run(first.id)
    again = await engine.start_run("once", enrollment_key="account:42")
    assert len({first.id, other.id, again.id}) == 3


async def test_manual_starts_check_the_payload_format(engine: Engine) -> None:
    await engine.publish_workflow(
        {**BASE, "name": "typed", "payload_format": {"account_id": "string", "seats": {"type": "number"}}}
    )
    with pytest.raises(ConfigError) as info:
        await engine.start_run("typed", {"account_id": 7})
    assert info.value.code == "payload_invalid"
    assert {e["path"] for e in info.value.info.details["errors"]} == {"payload.account_id", "payload.seats"}
    assert await engine.list_runs() == [], "a refused start stores nothing"
    run = await engine.start_run("typed", {"account_id": "acme", "seats": 12})
    assert run.input == {"account_id": "acme", "seats": 12}
