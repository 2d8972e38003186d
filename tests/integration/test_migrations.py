"""Migrations produce the declared schema, apply once, and refuse tampering."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import asyncpg
import pytest

from agentflow.core.errors import AgentflowError
from agentflow.core.graph.code_nodes import needs_code
from agentflow.store import migrate
from tests.support.db import DatabaseServer, with_database

# The declared schema: every table, the columns code relies on, and the indexes that carry
# guarantees (G3 one active run per key, G5 one checkpoint per step, the claim index).
DECLARED_COLUMNS = {
    "workspaces": {"id", "name", "created_at", "run_retention_days"},
    "workflows": {
        "workspace_id", "id", "name", "kind", "latest_version", "draft", "enabled", "created_at", "updated_at",
        "archived_at",
    },
    "workflow_versions": {
        "workspace_id", "workflow_id", "version", "config", "content_hash", "created_at", "refs", "needs_code",
    },
    "runs": {
        "workspace_id", "id", "workflow_id", "workflow_version", "status", "status_reason", "active",
        "enrollment_key", "input", "state", "output", "error", "step_seq", "attempt", "rescues", "due_at",
        "lease_owner", "lease_expires_at", "fencing_token", "cancel_requested", "parent_run_id",
        "input_tokens", "output_tokens", "cached_input_tokens", "usd_cost", "created_at", "started_at",
        "updated_at", "completed_at", "canceled_at", "trigger", "inbox_seq", "account_id", "costs",
        "began_token", "unstarted_rescues", "parent_step", "item_index", "start_key", "start_hash", "caller_node", "trace_parent",
        "conversation", "rerun_of", "children_ended",
    },
    "run_steps": {
        "workspace_id", "id", "run_id", "seq", "attempt", "node_id", "kind", "name", "status", "input",
        "output", "error", "idempotency_key", "worker", "fencing_token", "started_at", "finished_at",
        "input_tokens", "output_tokens", "cached_input_tokens", "usd_cost", "model", "state",
    },
    "run_inbox": {"workspace_id", "id", "run_id", "kind", "payload", "created_at", "consumed_at", "consumed_seq"},
    "tasks": {
        "workspace_id", "id", "run_id", "origin_key", "title", "description", "assignee", "due_at", "priority",
        "status", "system_generated", "account_id", "metadata", "expires_at", "created_at", "updated_at",
        "completed_at", "revision",
    },
    "notifications": {
        "workspace_id", "id", "run_id", "origin_key", "channel", "recipient", "subject", "body", "status",
        "attempts", "last_error", "created_at", "sent_at", "kind", "task_id", "account_id", "metadata",
        "due_at", "lease_owner", "lease_expires_at",
    },
    "events": {
        "workspace_id", "topic", "message_id", "xid", "seq", "data", "account_id", "published_at", "received_at",
        "trace_parent",
    },
    "consumer_offsets": {"consumer", "workspace_id", "xid", "seq", "updated_at"},
    "schedules": {"workspace_id", "workflow_id", "last_fire", "next_fire_at", "updated_at"},
    "dispatch_decisions": {
        "workspace_id", "id", "workflow_id", "event_topic", "event_message_id", "decision", "enrollment_key",
        "run_id", "reason", "created_at", "decided_at",
    },
    "dispatch_outcomes": {  # a view: decisions and misses, one row per (event, workflow)
        "workspace_id", "id", "workflow_id", "event_topic", "event_message_id", "decision", "enrollment_key",
        "run_id", "reason", "created_at", "decided_at",
    },
    "dispatch_misses": {
        "workspace_id", "id", "event_topic", "event_message_id", "workflow_ids", "versions", "created_at",
    },
    "access_keys": {"id", "workspace_id", "kind", "name", "secret_hash", "created_at", "last_used_at", "revoked_at", "role"},
    "webhook_secrets": {"workspace_id", "workflow_id", "ciphertext", "created_at"},
    "debounce_windows": {"workspace_id", "workflow_id", "debounce_key", "first_at", "last_at", "fire_at", "events"},
    "debounce_events": {"workspace_id", "workflow_id", "debounce_key", "seq", "event"},
    "gate_requests": {
        "workspace_id", "id", "workflow_id", "workflow_version", "event", "trigger", "status", "attempts",
        "due_at", "lease_owner", "verdict", "created_at", "decided_at",
    },
    "accounts": {"workspace_id", "id", "name", "owner", "attributes", "created_at", "updated_at"},
    "requests": {
        "workspace_id", "id", "run_id", "step_seq", "tool", "arguments", "arguments_hash", "status", "reason",
        "decided_by", "created_at", "expires_at", "decided_at", "kind", "node_id", "message", "spec",
        "assignees", "channels", "timeout_action", "response", "responded_via", "link_tokens",
    },
    "request_replies": {
        "workspace_id", "id", "request_id", "via", "message_id", "sender", "given_to", "text", "received_at",
        "label", "score", "verdict", "outcome", "classified_at", "attempts", "lease_owner", "lease_expires_at",
        "due_at",
    },
    "request_threads": {"workspace_id", "request_id", "channel", "ts"},
    "workspace_budgets": {"workspace_id", "daily_usd", "daily_tokens", "updated_at"},
    "people": {"workspace_id", "handle", "name", "email", "roles", "created_at", "updated_at"},
    "credentials": {
        "id", "workspace_id", "name", "kind", "metadata", "secret", "secret_fields", "token_expires_at", "version",
        "refresh_owner", "refresh_until", "created_at", "updated_at",
    },
    "memory_messages": {
        "workspace_id", "namespace", "memory_key", "seq", "run_id", "step_seq", "role", "content",
        "created_at", "expires_at",
    },
    "memory_summaries": {
        "workspace_id", "namespace", "memory_key", "through_seq", "summary", "updated_at", "expires_at",
    },
    "run_deltas": {
        "workspace_id", "run_id", "step_seq", "attempt", "kind", "data", "xid", "seq", "created_at",
    },
    "oauth2_consents": {
        "state_hash", "workspace_id", "credential_name", "redirect_uri", "verifier", "expires_at", "created_at",
    },
    "workspace_usage": {
        "workspace_id", "day", "input_tokens", "output_tokens", "cached_input_tokens", "usd_cost", "model_calls",
    },
    "knowledge_documents": {
        "workspace_id", "id", "title", "source", "tags", "body", "content_hash", "created_at", "updated_at",
    },
    "audit_log": {
        "workspace_id", "id", "at", "actor", "actor_name", "role", "action", "method", "route", "target", "status",
        "finished_at",
    },
    # embedding: only where pgvector is available (the embedded test server has it).
    "knowledge_chunks": {"workspace_id", "document_id", "n", "heading", "body", "tsv", "embedding"},
}  # fmt: skip
DECLARED_INDEXES = {
    "runs_ready": "WHERE ((lease_owner IS NULL) AND (due_at IS NOT NULL))",
    "runs_lapsed": "WHERE (lease_owner IS NOT NULL)",
    "runs_one_active_per_key": "UNIQUE INDEX",
    "run_steps_one_checkpoint": "WHERE (status = 'completed'::text)",
    "runs_one_child_per_item": "WHERE (parent_step IS NOT NULL)",
    "runs_one_per_start_key": "WHERE (start_key IS NOT NULL)",
    "events_pkey": "(workspace_id, topic, message_id)",
    "events_by_position": "(xid, seq)",
    "requests_due": "WHERE ((status = 'pending'::text) AND (node_id IS NOT NULL))",
    "dispatch_misses_by_workflow": "USING gin (workflow_ids)",
    "runs_finished": "(workspace_id, COALESCE(completed_at, canceled_at, created_at)) WHERE",
    "workflow_versions_refs": "USING gin (refs)",
    "audit_by_workflow": "WHERE (target ? 'workflow_id'::text)",
    "runs_newest": "(workspace_id, created_at DESC, id DESC)",
    "runs_by_enrollment_key": "WHERE (enrollment_key IS NOT NULL)",
    "workflow_versions_refs_missing": "(workspace_id) WHERE (refs IS NULL)",
    "request_replies_unread": "(due_at) WHERE (outcome IS NULL)",
    "runs_by_conversation": "((conversation ->> 'id'::text)), created_at) WHERE (conversation IS NOT NULL)",
    "runs_by_channel": "((conversation ->> 'channel'::text)), created_at) WHERE (conversation IS NOT NULL)",
    "request_replies_held": "WHERE (outcome = 'held'::text)",
}


@pytest.fixture
async def empty_db(pg_server: DatabaseServer) -> AsyncIterator[asyncpg.Connection]:
    name = "agentflow_empty_migrations"
    admin = await asyncpg.connect(pg_server.admin_url)
    await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    await admin.execute(f"CREATE DATABASE {name}")
    conn = await asyncpg.connect(with_database(pg_server.admin_url, name))
    yield conn
    await conn.close()
    await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    await admin.close()


async def test_migrations_produce_the_declared_schema(empty_db: asyncpg.Connection) -> None:
    applied = await migrate.upgrade(empty_db)
    assert [m.version for m in applied] == [m.version for m in migrate.available()]
    rows = await empty_db.fetch(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'"
    )
    actual: dict[str, set[str]] = {}
    for row in rows:
        actual.setdefault(row["table_name"], set()).add(row["column_name"])
    actual.pop("agentflow_migrations")
    assert actual == DECLARED_COLUMNS
    for table, columns in actual.items():
        if table not in ("workspaces",):
            assert "workspace_id" in columns, f"{table} lacks workspace_id"
    indexes = {
        r["indexname"]: r["indexdef"]
        for r in await empty_db.fetch("SELECT indexname, indexdef FROM pg_indexes")
    }
    for name, fragment in DECLARED_INDEXES.items():
        assert fragment in indexes[name], indexes.get(name)
    assert await empty_db.fetchval("SELECT name FROM workspaces") == "default"


async def test_upgrade_is_idempotent_and_versions_are_immutable(empty_db: asyncpg.Connection) -> None:
    await migrate.upgrade(empty_db)
    assert await migrate.upgrade(empty_db) == []
    ws = await empty_db.fetchval("SELECT id FROM workspaces")
    wf = await empty_db.fetchval(
        "INSERT INTO workflows (workspace_id, id, name, kind, latest_version)"
        " VALUES ($1, gen_random_uuid(), 'w', 'structured', 1) RETURNING id",
        ws,
    )
    await empty_db.execute(
        "INSERT INTO workflow_versions (workspace_id, workflow_id, version, config, content_hash)"
        " VALUES ($1, $2, 1, '{}', 'h')",
        ws,
        wf,
    )
    with pytest.raises(asyncpg.RaiseError, match="immutable"):
        await empty_db.execute("UPDATE workflow_versions SET config = '{\"x\": 1}'")
    # The one change allowed: recording the references of a version that has none yet, alone.
    with pytest.raises(asyncpg.RaiseError, match="immutable"):
        await empty_db.execute("UPDATE workflow_versions SET refs = '{tool:x}', content_hash = 'g'")
    await empty_db.execute("UPDATE workflow_versions SET refs = '{tool:x}'")
    with pytest.raises(asyncpg.RaiseError, match="immutable"):
        await empty_db.execute("UPDATE workflow_versions SET refs = '{tool:y}'")


async def test_a_version_needs_a_code_worker_when_a_run_code_node_appears_anywhere(
    empty_db: asyncpg.Connection,
) -> None:
    await migrate.upgrade(empty_db)
    ws = await empty_db.fetchval("SELECT id FROM workspaces")
    configs = {
        '{"nodes": [{"id": "a", "type": "mapping"}]}': False,
        '{"nodes": [{"id": "a", "type": "run_code", "code": "x"}]}': True,
        '{"nodes": [{"id": "a", "type": "agent", "tools": [{"id": "t", "type": "run_code"}]}]}': True,
        '{"kind": "agent", "tools": ["run_code"]}': False,  # a tool named so is not a code step
    }
    for n, config in enumerate(configs, start=1):
        wf = await empty_db.fetchval(
            "INSERT INTO workflows (workspace_id, id, name, kind, latest_version)"
            " VALUES ($1, gen_random_uuid(), $2, 'structured', 1) RETURNING id",
            ws,
            f"w{n}",
        )
        await empty_db.execute(
            "INSERT INTO workflow_versions (workspace_id, workflow_id, version, config, content_hash)"
            " VALUES ($1, $2, 1, $3::jsonb, 'h')",
            ws,
            wf,
            config,
        )
        needed = await empty_db.fetchval(
            "SELECT needs_code FROM workflow_versions WHERE workflow_id = $1", wf
        )
        assert needed is configs[config], config
        assert needs_code(json.loads(config)) is needed, config  # the worker's own check agrees


async def test_tampered_or_unknown_migrations_are_refused(empty_db: asyncpg.Connection) -> None:
    await migrate.upgrade(empty_db)
    real = await empty_db.fetchval("SELECT checksum FROM agentflow_migrations WHERE version = 1")
    await empty_db.execute("UPDATE agentflow_migrations SET checksum = 'edited' WHERE version = 1")
    with pytest.raises(AgentflowError) as info:
        await migrate.upgrade(empty_db)
    assert info.value.code == "migration_modified"
    await empty_db.execute("UPDATE agentflow_migrations SET checksum = $1 WHERE version = 1", real)
    await empty_db.execute("INSERT INTO agentflow_migrations VALUES (9999, 'future', 'x')")
    with pytest.raises(AgentflowError) as info:
        await migrate.upgrade(empty_db)
    assert info.value.code == "schema_too_new"
