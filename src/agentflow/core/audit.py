"""What the audit log records (issue 15, seed 004: "who did what"): the API's control-plane
writes (workflows, versions, keys, credentials, people, budgets, the workspace) and what people
do to runs, requests and tasks, each under a stable action name.

Data-plane writes are not audited: events, run starts, triggers and chat messages arrive by
the thousand and are recorded where they land (the event log, the run). Every write route is
in exactly one of the two tables, so a new route must choose (a test walks the app's routes).
"""

from __future__ import annotations

ACTIONS: dict[tuple[str, str], str] = {
    ("POST", "/api/ai/workflows"): "workflow.publish",
    ("PATCH", "/api/ai/workflows/{workflow_id}"): "workflow.update",
    ("DELETE", "/api/ai/workflows/{workflow_id}"): "workflow.delete",
    ("POST", "/api/ai/workflows/{workflow_id}/rollback"): "workflow.rollback",
    ("PUT", "/api/ai/workflows/{workflow_id}/webhook-secret"): "workflow.webhook_secret.set",
    ("DELETE", "/api/ai/workflows/{workflow_id}/webhook-secret"): "workflow.webhook_secret.delete",
    ("POST", "/api/ai/workflows/{workflow_id}/runs/migrate"): "run.migrate",
    ("POST", "/api/ai/workflows/{workflow_id}/runs/{run_id}/cancel"): "run.cancel",
    ("POST", "/api/ai/workflows/{workflow_id}/runs/{run_id}/retry"): "run.retry",
    ("POST", "/api/ai/workflows/{workflow_id}/runs/{run_id}/rerun"): "run.rerun",
    ("POST", "/api/runs/{run_id}/resume"): "run.resume",
    ("POST", "/v2/executions/{execution_id}/resume"): "run.resume",
    ("POST", "/api/approvals/{approval_id}/approve"): "approval.approve",
    ("POST", "/api/approvals/{approval_id}/reject"): "approval.reject",
    ("POST", "/api/requests/{request_id}/respond"): "request.respond",
    ("PATCH", "/api/tasks/{task_id}"): "task.update",
    ("POST", "/api/tasks/{task_id}/complete"): "task.complete",
    ("POST", "/api/keys"): "key.create",
    ("DELETE", "/api/keys/{key_id}"): "key.revoke",
    ("POST", "/api/workspaces"): "workspace.create",
    ("PATCH", "/api/workspaces/{workspace_id}"): "workspace.rename",
    ("POST", "/api/credentials"): "credential.create",
    ("PUT", "/api/credentials/{name}"): "credential.put",
    ("DELETE", "/api/credentials/{name}"): "credential.delete",
    ("POST", "/api/credentials/{name}/oauth2/authorize"): "credential.authorize",
    ("POST", "/api/credentials/{name}/oauth2/callback"): "credential.connect",
    ("PUT", "/api/people/{handle}"): "person.put",
    ("DELETE", "/api/people/{handle}"): "person.delete",
    ("PUT", "/api/budget"): "budget.set",
    ("POST", "/api/knowledge"): "knowledge.add",
    ("DELETE", "/api/knowledge/{document_id}"): "knowledge.delete",
    ("DELETE", "/api/memory"): "memory.delete",
}
"""Audited writes: (method, route template) -> action."""

DATA_PLANE: frozenset[tuple[str, str]] = frozenset(
    {
        ("POST", "/api/ai/workflows/{workflow_id}/runs"),
        ("POST", "/v2/workflows/{workflow_id}/execute"),
        ("POST", "/api/events"),
        ("PUT", "/api/accounts/{account_id}"),
        ("POST", "/api/private/trigger/{workflow_id}"),
        ("POST", "/api/employees/{name}/messages"),
    }
)
"""Writes left out of the audit log (recorded where they land). Routes under ``/api/public/``
act by a token, not a workspace key, and have no entry of their own here: an answer by link
(an emailed link, a Slack button) is audited by ``HumanRequests.respond_by_link`` instead."""

PUBLIC_PREFIX = "/api/public/"


def action_for(method: str, route: str) -> str | None:
    """The action a request to ``route`` (its path template) records, or None."""
    return ACTIONS.get((method.upper(), route))


def is_decided(method: str, route: str) -> bool:
    """Whether the write ``method route`` is either audited or deliberately not."""
    key = (method.upper(), route)
    return key in ACTIONS or key in DATA_PLANE or route.startswith(PUBLIC_PREFIX)
