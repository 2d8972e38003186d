"""Webhook triggers: public (a trigger key, optionally signed) and private (an API key) calls
that start workflows; the workflow's signing secret; its dispatch decisions."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from agentflow.api import strict_json
from agentflow.api.deps import EngineDep, WorkspaceDep, workflow_ref
from agentflow.api.errors import ApiError
from agentflow.api.schemas import ERROR_RESPONSES, conflict
from agentflow.core.errors import AuthError, ForbiddenError
from agentflow.core.roles import allows
from agentflow.engine import Engine
from agentflow.webhooks import Fired

router = APIRouter(tags=["triggers"], responses={**ERROR_RESPONSES})

TRIGGER_KEY_HEADER = "X-Agentflow-Trigger-Key"
_API_KEY = HTTPBearer(auto_error=False, description="A workspace API key (afk_...).")


class EventRef(BaseModel):
    """The event a call became in the event log."""

    topic: str
    message_id: str


class TriggerResult(BaseModel):
    """What the call did."""

    decision: str = Field(
        description="`started`, `enrolled`, `restarted`, `skipped`, `debounced`, `gate_pending`,"
        " `not_matched`, `reuse_rejected` or `not_runnable`. (When the enrollment key template"
        " fails, the call is answered 422 `template_error` / `template_limit` instead.)",
        examples=["started"],
    )
    run_id: UUID | None = Field(description="The run started, enrolled into or skipped for.")
    debounced: bool = Field(
        description="True: the call waits in a debounce window; a run starts when it closes."
    )
    replayed: bool = Field(
        description="True: this request id was seen before; this is the original decision."
    )
    enrollment_key: str | None
    event: EventRef
    reason: Any = Field(default=None, description="Why (private triggers only).")


class Secret(BaseModel):
    """A new signing secret: shown once."""

    secret: str = Field(description="`whsec_...`: sign public calls with it (Standard Webhooks).")


class Decision(BaseModel):
    """What was decided for one event at the workflow."""

    id: int
    event_topic: str
    event_message_id: str
    decision: str
    enrollment_key: str | None
    run_id: UUID | None
    reason: Any
    created_at: datetime
    decided_at: datetime | None


class DecisionList(BaseModel):
    """Newest first; pass the last id as `before` for the next page."""

    decisions: list[Decision]


_FIRED: dict[int | str, dict[str, Any]] = {
    200: {"model": TriggerResult, "description": "A replay: this request id was seen; the original decision"},
    **conflict("`workflow_disabled`, `trigger_contention` (retry), `secret_unreadable`"),
}

PAYLOAD_DOC = (
    "The body is the run's payload (a JSON object, checked against the workflow's payload_format)."
    " Send `Idempotency-Key` (or Standard Webhooks' `webhook-id`) to make retries safe: a repeated id"
    " returns the original decision (200) instead of acting twice."
)


@router.post(
    "/api/public/trigger/{public_api_key}/{workflow_id}",
    response_model=TriggerResult,
    status_code=202,
    responses=_FIRED,
    summary="Public trigger (key in the URL)",
    description=PAYLOAD_DOC,
)
async def public_trigger(
    public_api_key: str,
    workflow_id: str,
    request: Request,
    response: Response,
    engine: EngineDep,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> TriggerResult:
    """Start the workflow from a public webhook (a trigger key ``aft_...`` in the URL)."""
    workspace = await engine.keys.authenticate(public_api_key, "trigger")
    return await _fire_public(engine, workspace, workflow_id, request, response, idempotency_key)


@router.post(
    "/api/public/trigger/{workflow_id}",
    response_model=TriggerResult,
    status_code=202,
    responses=_FIRED,
    summary=f"Public trigger (key in {TRIGGER_KEY_HEADER})",
    description=PAYLOAD_DOC,
)
async def public_trigger_header(
    workflow_id: str,
    request: Request,
    response: Response,
    engine: EngineDep,
    trigger_key: Annotated[str | None, Header(alias=TRIGGER_KEY_HEADER)] = None,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> TriggerResult:
    """Start the workflow from a public webhook (the trigger key in a header, out of URLs and logs)."""
    workspace = await engine.keys.authenticate(trigger_key or "", "trigger")
    return await _fire_public(engine, workspace, workflow_id, request, response, idempotency_key)


@router.post(
    "/api/private/trigger/{workflow_id}",
    response_model=TriggerResult,
    status_code=202,
    responses=_FIRED,
    summary="Private trigger (API key)",
    description=PAYLOAD_DOC,
)
async def private_trigger(
    workflow_id: str,
    request: Request,
    response: Response,
    engine: EngineDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_API_KEY)],
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> TriggerResult:
    """Start the workflow from an authenticated call (``Authorization: Bearer afk_...``)."""
    if credentials is None:
        raise AuthError(
            "unauthorized",
            "the private trigger needs a workspace API key",
            solution="Send 'Authorization: Bearer afk_...' (create one with 'agentflow keys create').",
        )
    workspace, role = await engine.keys.authenticate_with_role(credentials.credentials, "api")
    if not allows(role, "operator"):
        raise ForbiddenError(
            "role_forbidden",
            f"starting a run needs an API key with the operator role or above; this one is {role}",
            details={"role": role, "needed": "operator"},
            solution="Use an operator's or an admin's key.",
        )
    version = await engine.webhooks.target(workflow_ref(workflow_id), workspace_id=workspace)
    payload = _payload(await request.body())
    fired = await engine.webhooks.fire(
        version, payload, source="private", request_id=idempotency_key, workspace_id=workspace
    )
    return _result(fired, response, with_reason=True)


@router.put(
    "/api/ai/workflows/{workflow_id}/webhook-secret",
    response_model=Secret,
    status_code=201,
    summary="Require signed public calls (new signing secret)",
    responses=conflict("`secret_key_missing` (the server has no AGENTFLOW_SECRET_KEY)"),
)
async def rotate_secret(workflow_id: str, engine: EngineDep, workspace: WorkspaceDep) -> Secret:
    """Give the workflow a new Standard Webhooks signing secret (the old one stops working)."""
    workflow = await engine.get_workflow(workflow_ref(workflow_id), workspace_id=workspace)
    return Secret(secret=await engine.webhooks.rotate_secret(workflow.id, workspace_id=workspace))


@router.delete(
    "/api/ai/workflows/{workflow_id}/webhook-secret",
    status_code=204,
    summary="Stop requiring signed public calls",
)
async def remove_secret(workflow_id: str, engine: EngineDep, workspace: WorkspaceDep) -> Response:
    """Remove the signing secret (idempotent)."""
    workflow = await engine.get_workflow(workflow_ref(workflow_id), workspace_id=workspace)
    await engine.webhooks.remove_secret(workflow.id, workspace_id=workspace)
    return Response(status_code=204)


@router.get(
    "/api/ai/workflows/{workflow_id}/decisions",
    response_model=DecisionList,
    summary="What events did at this workflow, and why",
)
async def list_decisions(
    workflow_id: str,
    engine: EngineDep,
    workspace: WorkspaceDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
) -> DecisionList:
    """Dispatch decisions, newest first: started, enrolled, debounced, not matched (with why)..."""
    workflow = await engine.get_workflow(workflow_ref(workflow_id), workspace_id=workspace)
    rows = await engine.events.decisions(workflow.id, limit=limit, before=before, workspace_id=workspace)
    return DecisionList(decisions=[Decision(**row) for row in rows])


async def _fire_public(
    engine: Engine,
    workspace: UUID,
    workflow_id: str,
    request: Request,
    response: Response,
    idempotency_key: str | None,
) -> TriggerResult:
    version = await engine.webhooks.target(workflow_ref(workflow_id), workspace_id=workspace)
    body = await request.body()
    signed_id = await engine.webhooks.verify(
        version.workflow_id, body, request.headers, workspace_id=workspace
    )
    request_id = signed_id or idempotency_key or request.headers.get("webhook-id")
    fired = await engine.webhooks.fire(
        version, _payload(body), source="public", request_id=request_id, workspace_id=workspace
    )
    return _result(fired, response, with_reason=False)


def _payload(body: bytes) -> Any:
    # The body guard already refused what strict JSON refuses; an empty body means {}.
    return strict_json.parse(body) if body.strip() else {}


def _result(fired: Fired, response: Response, *, with_reason: bool) -> TriggerResult:
    d = fired.decision
    if d.decision == "key_error":
        _refuse_key_error(fired, with_reason=with_reason)
    if fired.replayed:
        response.status_code = 200
    return TriggerResult(
        decision=d.decision,
        run_id=d.run_id,
        debounced=fired.debounced,
        replayed=fired.replayed,
        enrollment_key=d.key,
        event=EventRef(topic=fired.topic, message_id=fired.message_id),
        reason=d.reason if with_reason else None,
    )


def _refuse_key_error(fired: Fired, *, with_reason: bool) -> None:
    """The workflow's enrollment key template failed on this call (``template_limit``,
    ``template_error``): a 422 with that code. The event stays stored and the decision
    recorded, so a retry with the same id gets the same answer. Public callers are not shown
    the workflow's template (nor its conditions)."""
    reason = fired.decision.reason if isinstance(fired.decision.reason, dict) else {}
    code = str(reason.get("code") or "template_error")
    message = (
        str(reason.get("message"))
        if with_reason and reason.get("message")
        else "the workflow's enrollment key could not be computed from this call"
    )
    event = {"topic": fired.topic, "message_id": fired.message_id}
    raise ApiError(
        422,
        code,
        message,
        details={"decision": "key_error", "event": event, "replayed": fired.replayed},
        solution="The workflow's owner must fix its trigger.enrollment.key template."
        if not with_reason
        else str(reason.get("solution") or "Fix the workflow's trigger.enrollment.key template."),
    )
