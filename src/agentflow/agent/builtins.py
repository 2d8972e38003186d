"""The built-in agent tools: generate_plan, create_task, send_notification, wait, complete.

Each returns a ``ToolOutcome``: the result the model sees, and the writes its checkpoint
makes (tasks, notifications: exactly once, inside the checkpoint), or how the run moves
(wait, complete). Arguments arrive already checked against the tool's JSON Schema.
"""

from __future__ import annotations

import logging
import re
import uuid
from datetime import datetime, timedelta
from typing import Any

from agentflow.agent.calls import CallContext, ToolOutcome, refusal
from agentflow.core.chat import ToolSchema
from agentflow.core.durations import parse_duration
from agentflow.core.errors import ConfigError
from agentflow.llm.base import Embedder, ModelError

logger = logging.getLogger(__name__)

_EMAIL = re.compile(r"^[^@\s<>\"',;]{1,64}@[A-Za-z0-9.-]{1,253}\.[A-Za-z]{2,63}$")
_DURATION = {"type": "string", "description": "e.g. '30m', '2h', '3d'", "maxLength": 40}
_DATETIME = {
    "type": "string",
    "description": "ISO 8601 date-time, e.g. 2026-11-30T09:00:00Z",
    "maxLength": 40,
}
MAX_WAIT = timedelta(days=365)

SCHEMAS: dict[str, ToolSchema] = {
    "generate_plan": ToolSchema(
        "generate_plan",
        "Retrieve customer-success best practices for a scenario (e.g. 'get well plan', 'expansion', "
        "'adoption', 'renewal', 'pricing concerns', 'meeting follow-up') and make them the run's plan, "
        "with the sources it cites.",
        {
            "type": "object",
            "properties": {"scenario": {"type": "string", "minLength": 1, "maxLength": 200}},
            "required": ["scenario"],
            "additionalProperties": False,
        },
    ),
    "create_task": ToolSchema(
        "create_task",
        "Create a task for a person (system-generated, linked to this run: you will see its changes).",
        {
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 1, "maxLength": 300},
                "description": {"type": "string", "maxLength": 5000},
                "assignee": {"type": "string", "maxLength": 200, "description": "email address or user name"},
                "due_at": _DATETIME,
                "due_in": _DURATION,
                "priority": {"type": "string", "enum": ["low", "medium", "high", "urgent"]},
                "account_id": {"type": "string", "maxLength": 200},
            },
            "required": ["title"],
            "additionalProperties": False,
        },
    ),
    "send_notification": ToolSchema(
        "send_notification",
        "Notify a person by email, Slack or in-app. 'to' is an email address, 'account_owner' (the "
        "account's owner), or a user name (in_app).",
        {
            "type": "object",
            "properties": {
                "channel": {"type": "string", "enum": ["email", "slack", "in_app"]},
                "to": {"type": "string", "minLength": 1, "maxLength": 320},
                "subject": {"type": "string", "maxLength": 200},
                "message": {"type": "string", "minLength": 1, "maxLength": 10000},
            },
            "required": ["channel", "to", "message"],
            "additionalProperties": False,
        },
    ),
    "wait": ToolSchema(
        "wait",
        "Pause the run for a duration or until a time. By default it wakes early when something "
        "changes (a task you created is updated, a new event for this run arrives).",
        {
            "type": "object",
            "properties": {
                "duration": _DURATION,
                "until": _DATETIME,
                "wake_on_event": {"type": "boolean"},
            },
            "additionalProperties": False,
        },
    ),
    "complete": ToolSchema(
        "complete",
        "Mark this run complete, with a summary of what was done.",
        {
            "type": "object",
            "properties": {"summary": {"type": "string", "minLength": 1, "maxLength": 5000}},
            "required": ["summary"],
            "additionalProperties": False,
        },
    ),
}


async def generate_plan(ctx: CallContext, args: dict[str, Any]) -> ToolOutcome:
    """Retrieve playbooks for the scenario and make them the run's plan.

    When the workflow's model provider makes embeddings (OpenAI, Gemini) and pgvector is
    there, retrieval also ranks by meaning; if embedding fails, full-text search decides.
    """
    knowledge, workspace_id = ctx.env.knowledge, ctx.run.workspace_id
    provider, _ = ctx.env.model(ctx.config.model)
    try:
        embedder = provider if isinstance(provider, Embedder) else None
        plan = await knowledge.plan(args["scenario"], workspace_id=workspace_id, embedder=embedder)
    except (ModelError, ConfigError) as exc:
        logger.warning("generate_plan: embeddings unavailable (%s); using full-text search", exc)
        try:
            plan = await knowledge.plan(args["scenario"], workspace_id=workspace_id)
        except ConfigError as bad:  # a scenario the search cannot use: the model hears why
            return refusal(bad.code, bad.info.message)
    doc = plan.to_json()
    return ToolOutcome(result={"plan": doc}, plan=doc)


def create_task(ctx: CallContext, args: dict[str, Any]) -> ToolOutcome:
    """A task written by the checkpoint, with an id the model can refer to."""
    due_at = _due(ctx.now, args)
    if isinstance(due_at, ToolOutcome):
        return due_at
    expiry = ctx.config.action("create_tasks").expiry
    task_id = uuid.uuid5(ctx.run.id, f"task:{ctx.seq}")
    account_id = args.get("account_id") or ctx.run.account_id
    doc: dict[str, Any] = {
        "id": str(task_id),
        "title": args["title"],
        "description": args.get("description"),
        "assignee": args.get("assignee"),
        "due_at": due_at.isoformat() if due_at else None,
        "priority": args.get("priority", "medium"),
        "account_id": account_id,
        "metadata": {"workflow_id": str(ctx.run.workflow_id), "call_id": ctx.call.id},
        "expires_in": expiry.total_seconds() if expiry else None,
    }
    shown = {k: v for k, v in doc.items() if k != "metadata" and v is not None}
    return ToolOutcome(result={"created": shown}, tasks=[doc])


def send_notification(ctx: CallContext, args: dict[str, Any]) -> ToolOutcome:
    """A notification written to the outbox by the checkpoint; the notifier delivers it."""
    action = ctx.config.action("send_notifications")
    channel = args["channel"]
    if action.channels is not None and channel not in action.channels:
        return refusal("channel_not_allowed", f"this workflow may notify through {action.channels} only")
    recipient = str(args["to"]).strip()
    if recipient == "account_owner":
        owner = (ctx.account or {}).get("owner")
        if not owner:
            return refusal("no_account_owner", "the run's account has no owner on record; name a recipient")
        recipient = str(owner)
    metadata: dict[str, Any] = {"workflow_id": str(ctx.run.workflow_id), "call_id": ctx.call.id}
    if channel == "email" and not _EMAIL.match(recipient):
        return refusal("bad_recipient", f"{recipient!r} is not an email address")
    if channel == "slack":
        if not action.slack_webhook_url:
            return refusal("slack_not_configured", "this workflow has no Slack webhook configured")
        metadata["slack_webhook_url"] = action.slack_webhook_url
    note_id = uuid.uuid5(ctx.run.id, f"notification:{ctx.seq}")
    subject = args.get("subject") or args["message"].splitlines()[0][:120]
    doc = {
        "id": str(note_id),
        "channel": channel,
        "recipient": recipient,
        "subject": subject,
        "body": args["message"],
        "kind": "message",
        "account_id": ctx.run.account_id,
        "metadata": metadata,
    }
    status = "delivered" if channel == "in_app" else "queued"
    result = {"notification": {"id": str(note_id), "channel": channel, "to": recipient, "status": status}}
    return ToolOutcome(result=result, notifications=[doc])


def wait(ctx: CallContext, args: dict[str, Any]) -> ToolOutcome:
    """Sleep durably until a time, for a duration, or until something changes."""
    on_event = bool(args.get("wake_on_event", True))
    if ("duration" in args) == ("until" in args):
        return refusal("invalid_tool_args", "give exactly one of 'duration' or 'until'")
    if "duration" in args:
        try:
            delay = parse_duration(args["duration"])
        except ConfigError as exc:
            return refusal("invalid_tool_args", exc.info.message)
        wake_at = ctx.now + delay
    else:
        parsed = _datetime(args["until"])
        if parsed is None:
            return refusal("invalid_tool_args", f"'until' is not an ISO 8601 date-time: {args['until']!r}")
        wake_at = parsed
    if wake_at - ctx.now > MAX_WAIT:
        return refusal("invalid_tool_args", "a wait may last one year at most")
    result = {"waiting_until": wake_at.isoformat(), "wakes_on_event": on_event}
    return ToolOutcome(result=result, wait_until=wake_at, wake_on_event=on_event)


def complete_schema(output_schema: dict[str, Any] | None) -> ToolSchema:
    """The ``complete`` tool as offered: with an ``output_schema``, it also takes ``data``."""
    plain = SCHEMAS["complete"]
    if output_schema is None:
        return plain
    parameters = {
        **plain.parameters,
        "properties": {**plain.parameters["properties"], "data": output_schema},
        "required": ["summary", "data"],
    }
    description = plain.description + " Give the result as `data`, which must match its schema."
    return ToolSchema("complete", description, parameters)


def complete(ctx: CallContext, args: dict[str, Any]) -> ToolOutcome:
    """End the run with a summary (and ``data``, checked against the output schema already)."""
    return ToolOutcome(result={"completed": True}, complete=str(args["summary"]), data=args.get("data"))


def _due(now: datetime, args: dict[str, Any]) -> datetime | ToolOutcome | None:
    if "due_at" in args:
        parsed = _datetime(args["due_at"])
        if parsed is None:
            return refusal("invalid_tool_args", f"'due_at' is not an ISO 8601 date-time: {args['due_at']!r}")
        return parsed
    if "due_in" in args:
        try:
            return now + parse_duration(args["due_in"])
        except ConfigError as exc:
            return refusal("invalid_tool_args", exc.info.message)
    return None


def _datetime(text: str) -> datetime | None:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if value.tzinfo is None:
        return None
    return value
