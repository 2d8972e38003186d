"""Rotating AGENTFLOW_SECRET_KEY (issue 13): with the new key current and the old one previous,
every secret stays readable; ``agentflow credentials rotate-key`` seals them all again with the
new key; then the old key can go, and a process with only the old key reads nothing."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import standardwebhooks

from agentflow.core.errors import AgentflowError, StepFailure
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.engine import Engine
from agentflow.integrations.guarded_http import guarded_client
from agentflow.nodes.credential_access import CredentialAccess
from tests.conftest import make_settings
from tests.support.cli import cli_env, run_cli

OLD, NEW = (base64.b64encode(os.urandom(32)).decode() for _ in range(2))


@asynccontextmanager
async def keyed(database_url: str, **keys: str) -> AsyncIterator[Engine]:
    eng = await Engine.connect(make_settings(database_url, **keys), migrate_schema=False)
    try:
        yield eng
    finally:
        await eng.close()


async def readable(eng: Engine, workflow_id: Any, signing_secret: str) -> dict[str, str]:
    """How the credential (as a step reads it) and the webhook secret (as a call is checked)
    fare with this engine's keys: ``ok``, or the error's code."""
    current, previous = eng.sealing_keys()
    found: dict[str, str] = {}
    async with guarded_client() as http:
        access = CredentialAccess(eng.db.pool, lambda: current, http, previous_keys=previous)
        try:
            await access.resolve(DEFAULT_WORKSPACE, "k", "node")
            found["credential"] = "ok"
        except StepFailure as exc:
            found["credential"] = exc.info.code
    now = datetime.now(UTC)
    signature = standardwebhooks.Webhook(signing_secret).sign("msg_1", now, "{}")
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
    }
    try:
        verified = await eng.webhooks.verify(workflow_id, b"{}", headers, workspace_id=DEFAULT_WORKSPACE)
        found["webhook"] = "ok" if verified == "msg_1" else str(verified)
    except AgentflowError as exc:
        found["webhook"] = exc.info.code
    return found


OK = {"credential": "ok", "webhook": "ok"}
UNREADABLE = {"credential": "credential_unreadable", "webhook": "secret_unreadable"}


async def test_secrets_stay_readable_through_a_key_rotation(database_url: str) -> None:
    async with keyed(database_url, secret_key=OLD) as before:
        await before.credentials.create("k", {"kind": "api_key", "key": "KEY-SECRET"})
        published = await before.publish_workflow(
            {"name": "hooked", "kind": "structured", "nodes": [{"id": "done", "type": "finish", "output": 1}]}
        )
        workflow_id = published.workflow.id
        secret = await before.webhooks.rotate_secret(workflow_id, workspace_id=DEFAULT_WORKSPACE)
        assert await readable(before, workflow_id, secret) == OK
    async with keyed(database_url, secret_key=NEW) as new_only:
        assert await readable(new_only, workflow_id, secret) == UNREADABLE
    async with keyed(database_url, secret_key=NEW, secret_key_previous=OLD) as during:
        assert await readable(during, workflow_id, secret) == OK
    env = cli_env(database_url, AGENTFLOW_SECRET_KEY=NEW, AGENTFLOW_SECRET_KEY_PREVIOUS=OLD)
    rotated = run_cli(["credentials", "rotate-key"], env)
    assert rotated.returncode == 0, rotated.stderr
    assert "credentials: 1 sealed again, 0 already with this key" in rotated.stdout
    assert "webhook_secrets: 1 sealed again" in rotated.stdout
    again = run_cli(["credentials", "rotate-key"], env)
    assert "credentials: 0 sealed again, 1 already with this key" in again.stdout
    async with keyed(database_url, secret_key=NEW) as after:
        assert await readable(after, workflow_id, secret) == OK
    async with keyed(database_url, secret_key=OLD) as stale:
        assert await readable(stale, workflow_id, secret) == UNREADABLE
    wrong = run_cli(["credentials", "rotate-key"], cli_env(database_url, AGENTFLOW_SECRET_KEY=OLD))
    assert wrong.returncode == 1 and "unreadable with either key" in wrong.stderr
    assert "credentials k" in wrong.stderr
