"""Named queries for the impact report: what agent workflows' runs did, counted per workflow.

Five aggregate statements (runs and their trigger events, consumed inbox events, tasks,
notifications, steps), each starting from the runs of the workflows in scope through the
indexes by workflow and by run, all in one read-only REPEATABLE READ transaction so the
figures come from one snapshot. Every statement filters by workspace; the period
``[since, until)`` applies to each thing by its own time (see ``core.reports``).

The account filter applies to a run's things by the run's account, and to tasks and
notifications by their own account when they have one.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.frozen import frozen
from agentflow.core.reports import ImpactFigures

# Parameters of every statement: $1 workspace, $2 workflow ids, $3 account (or NULL),
# $4 since, $5 until (NULL: unbounded; coalesce keeps the condition usable by an index).
_RUNS_IN_SCOPE = "r.workspace_id = $1 AND r.workflow_id = ANY($2::uuid[])"
_RUN_ACCOUNT = "($3::text IS NULL OR r.account_id = $3)"


def _within(column: str) -> str:
    return (
        f"{column} >= coalesce($4::timestamptz, '-infinity'::timestamptz)"
        f" AND {column} < coalesce($5::timestamptz, 'infinity'::timestamptz)"
    )


# A run's trigger events: every event of a debounce window, else the one event, else none.
_TRIGGER_EVENTS = """
CASE WHEN jsonb_typeof(r.trigger #> '{debounced,events}') = 'array' THEN r.trigger #> '{debounced,events}'
     WHEN jsonb_typeof(r.trigger -> 'event') = 'object' THEN jsonb_build_array(r.trigger -> 'event')
     ELSE '[]'::jsonb END
"""

_RUNS = f"""
SELECT r.workflow_id, count(*) AS runs,
       coalesce(sum(e.events), 0) AS events, coalesce(sum(e.meetings), 0) AS meetings,
       coalesce(sum(r.input_tokens), 0) AS input_tokens,
       coalesce(sum(r.output_tokens), 0) AS output_tokens,
       coalesce(sum(r.cached_input_tokens), 0) AS cached_input_tokens,
       coalesce(sum(r.usd_cost), 0) AS usd_cost
FROM runs r
CROSS JOIN LATERAL (
    SELECT count(*) AS events, count(*) FILTER (WHERE doc ->> 'topic' LIKE 'meeting.%') AS meetings
    FROM jsonb_array_elements({_TRIGGER_EVENTS}) AS doc
) e
WHERE {_RUNS_IN_SCOPE} AND {_RUN_ACCOUNT} AND {_within("r.created_at")}
GROUP BY r.workflow_id
"""

# Inbox rows of kind 'trigger' are the trigger events again (counted above from runs.trigger).
_INBOX = f"""
SELECT r.workflow_id, count(*) AS events,
       count(*) FILTER (WHERE i.payload ->> 'topic' LIKE 'meeting.%') AS meetings
FROM runs r
JOIN run_inbox i ON i.workspace_id = r.workspace_id AND i.run_id = r.id
WHERE {_RUNS_IN_SCOPE} AND {_RUN_ACCOUNT}
  AND i.consumed_at IS NOT NULL AND i.kind <> 'trigger' AND {_within("i.consumed_at")}
GROUP BY r.workflow_id
"""

# Grouping sets: one row per workflow, and a total row whose distinct account count is the
# workspace's (accounts cannot be summed across workflows).
_TASKS = f"""
SELECT r.workflow_id, grouping(r.workflow_id) = 1 AS total,
       count(*) FILTER (WHERE {_within("t.created_at")}) AS created,
       count(DISTINCT coalesce(t.account_id, r.account_id)) FILTER (WHERE {_within("t.created_at")})
           AS accounts,
       count(*) FILTER (WHERE t.status = 'completed' AND {_within("t.completed_at")}
                        AND (t.due_at IS NULL OR t.completed_at <= t.due_at)) AS on_time,
       count(*) FILTER (WHERE t.status = 'completed' AND {_within("t.completed_at")}
                        AND t.completed_at > t.due_at) AS late
FROM runs r
JOIN tasks t ON t.workspace_id = r.workspace_id AND t.run_id = r.id
WHERE {_RUNS_IN_SCOPE} AND ($3::text IS NULL OR coalesce(t.account_id, r.account_id) = $3)
  AND ({_within("t.created_at")} OR (t.status = 'completed' AND {_within("t.completed_at")}))
GROUP BY GROUPING SETS ((r.workflow_id), ())
"""

_NOTIFICATIONS = f"""
SELECT r.workflow_id, count(*) AS sent
FROM runs r
JOIN notifications n ON n.workspace_id = r.workspace_id AND n.run_id = r.id
WHERE {_RUNS_IN_SCOPE} AND ($3::text IS NULL OR coalesce(n.account_id, r.account_id) = $3)
  AND n.status = 'sent' AND {_within("n.sent_at")}
GROUP BY r.workflow_id
"""

# One agent.decide step is one model call (failed attempts called the model too); a plan is
# a generate_plan tool call that completed.
_STEPS = f"""
SELECT r.workflow_id,
       count(*) FILTER (WHERE s.kind = 'agent.decide') AS model_calls,
       count(*) FILTER (WHERE s.kind = 'agent.tool' AND s.name = 'generate_plan'
                        AND s.status = 'completed') AS plans
FROM runs r
JOIN run_steps s ON s.workspace_id = r.workspace_id AND s.run_id = r.id
WHERE {_RUNS_IN_SCOPE} AND {_RUN_ACCOUNT}
  AND s.kind IN ('agent.decide', 'agent.tool') AND {_within("s.finished_at")}
GROUP BY r.workflow_id
"""


@frozen
class AgentWorkflow:
    """A workflow in a report's scope, with its latest version's config document."""

    id: UUID
    name: str
    kind: str
    config: dict[str, Any]


async def workflows_in_scope(
    pool: asyncpg.Pool, workspace_id: UUID, workflow_id: UUID | None = None
) -> list[AgentWorkflow]:
    """The agent workflows of the workspace (or the one given, whatever its kind), by name,
    each with its latest version's config."""
    rows = await pool.fetch(
        "SELECT w.id, w.name, w.kind, v.config FROM workflows w"
        " JOIN workflow_versions v ON v.workspace_id = w.workspace_id AND v.workflow_id = w.id"
        "  AND v.version = w.latest_version"
        " WHERE w.workspace_id = $1 AND (w.id = $2 OR ($2::uuid IS NULL AND w.kind IN ('agent', 'employee')))"
        " ORDER BY w.name",
        workspace_id,
        workflow_id,
    )
    return [AgentWorkflow(r["id"], r["name"], r["kind"], r["config"]) for r in rows]


async def impact_figures(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    workflow_ids: list[UUID],
    *,
    account_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> tuple[dict[UUID, ImpactFigures], int]:
    """Each workflow's figures in the period, and the distinct accounts of their action items.

    Returns:
        Figures by workflow id (every workflow given, zeros included) and the number of
        distinct accounts across all of them.
    """
    args = (workspace_id, workflow_ids, account_id, since, until)
    counts: dict[UUID, dict[str, Any]] = {w: {} for w in workflow_ids}
    distinct_accounts = 0
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        for row in await conn.fetch(_RUNS, *args):
            counts[row["workflow_id"]].update(
                runs=row["runs"], events=row["events"], meetings=row["meetings"],
                input_tokens=row["input_tokens"], output_tokens=row["output_tokens"],
                cached_input_tokens=row["cached_input_tokens"], usd_cost=row["usd_cost"],
            )  # fmt: skip
        for row in await conn.fetch(_INBOX, *args):
            counts[row["workflow_id"]].update(inbox_events=row["events"], inbox_meetings=row["meetings"])
        for row in await conn.fetch(_TASKS, *args):
            if row["total"]:
                distinct_accounts = row["accounts"]
                continue
            counts[row["workflow_id"]].update(
                tasks=row["created"], accounts=row["accounts"], on_time=row["on_time"], late=row["late"]
            )
        for row in await conn.fetch(_NOTIFICATIONS, *args):
            counts[row["workflow_id"]]["notifications"] = row["sent"]
        for row in await conn.fetch(_STEPS, *args):
            counts[row["workflow_id"]].update(model_calls=row["model_calls"], plans=row["plans"])
    return {w: _figures(c) for w, c in counts.items()}, distinct_accounts


def _figures(c: dict[str, Any]) -> ImpactFigures:
    return ImpactFigures(
        runs=int(c.get("runs", 0)),
        events_analysed=int(c.get("events", 0)) + int(c.get("inbox_events", 0)),
        meetings_analysed=int(c.get("meetings", 0)) + int(c.get("inbox_meetings", 0)),
        action_items=int(c.get("tasks", 0)),
        accounts=int(c.get("accounts", 0)),
        tasks_created=int(c.get("tasks", 0)),
        tasks_completed_on_time=int(c.get("on_time", 0)),
        tasks_completed_late=int(c.get("late", 0)),
        notifications_sent=int(c.get("notifications", 0)),
        plans_generated=int(c.get("plans", 0)),
        model_calls=int(c.get("model_calls", 0)),
        input_tokens=int(c.get("input_tokens", 0)),
        output_tokens=int(c.get("output_tokens", 0)),
        cached_input_tokens=int(c.get("cached_input_tokens", 0)),
        usd_cost=Decimal(c.get("usd_cost", 0)),
    )
