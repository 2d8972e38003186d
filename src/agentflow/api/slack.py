"""Slack's interaction callbacks (issue 14): a button pressed on a request posted to Slack
(``user_input`` channel ``slack``) answers it.

Slack signs each callback with the app's signing secret (``AGENTFLOW_SLACK_SIGNING_SECRET``):
a callback whose signature does not match, or whose timestamp is more than five minutes off
(a replay), gets 401 ``slack_signature_invalid`` and changes nothing. The button's value
carries the request's id and its single-use token; the answer is recorded as the Slack user
who pressed it, via ``slack``; a press after the first answer gets 409.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Header, Request
from pydantic import BaseModel, Field

from agentflow.api.deps import EngineDep
from agentflow.api.schemas import ERROR_RESPONSES, conflict
from agentflow.core.errors import AuthError, ConfigError, NotFoundError
from agentflow.engine import Engine
from agentflow.integrations.guarded_http import guarded_client
from agentflow.integrations.slack import signature_valid
from agentflow.nodes.request_slack import read_button

router = APIRouter(tags=["requests"], responses={**ERROR_RESPONSES})
logger = logging.getLogger(__name__)
TELL_SECONDS = 2.0
"""How long updating the Slack message may take (Slack wants its answer within 3 s)."""


class SlackAnswer(BaseModel):
    """What a button press did."""

    status: str = Field(description="The request's status after the press, or ``ignored``.")
    responded_by: str | None = None


@router.post(
    "/api/public/slack/interactions",
    response_model=SlackAnswer,
    summary="Slack interaction callback (buttons on requests)",
    responses=conflict("`request_already_answered`"),
)
async def slack_interaction(
    request: Request,
    engine: EngineDep,
    timestamp: Annotated[str | None, Header(alias="X-Slack-Request-Timestamp", max_length=20)] = None,
    signature: Annotated[str | None, Header(alias="X-Slack-Signature", max_length=200)] = None,
) -> SlackAnswer:
    """Verify Slack's signature, then answer the request the pressed button names. Slack sends
    a form (``payload=<JSON>``). 404 ``slack_not_configured`` without a signing secret; 401
    ``slack_signature_invalid``; 422 ``slack_payload_invalid``."""
    secret = engine.settings.slack_signing_secret
    if secret is None:
        raise NotFoundError(
            "slack_not_configured",
            "this server takes no Slack callbacks",
            solution="Set AGENTFLOW_SLACK_SIGNING_SECRET to the Slack app's signing secret.",
        )
    body = await request.body()
    if not signature_valid(secret.get_secret_value(), timestamp or "", body, signature or "", time.time()):
        raise AuthError(
            "slack_signature_invalid",
            "the callback is not signed with this server's Slack signing secret, or is too old",
            solution="Check AGENTFLOW_SLACK_SIGNING_SECRET against the Slack app's signing secret.",
        )
    payload = _payload(body)
    actions = payload.get("actions") or [{}]
    pressed = read_button(str(actions[0].get("value") or ""))
    if pressed is None:  # the Open button (a link), or something else
        return SlackAnswer(status="ignored")
    request_id, token, decision = pressed
    user = payload.get("user") or {}
    who = str(user.get("username") or user.get("name") or user.get("id") or "someone")
    try:
        found = uuid.UUID(request_id)
    except ValueError:
        raise AuthError("link_invalid", "this button does not answer any request") from None
    answered = await engine.requests.respond_by_link(
        found, token, approved=decision == "approve", response=None, reason=None, responded_by=f"slack:{who}"
    )
    await _tell_slack(engine, payload.get("response_url"), f"{answered['status'].capitalize()} by {who}.")
    return SlackAnswer(status=answered["status"], responded_by=answered["responded_by"])


async def _tell_slack(engine: Engine, response_url: Any, text: str) -> None:
    """Replace the message's buttons with who decided (Slack's ``response_url``); the answer
    is recorded whatever Slack says, so a failure here is only logged."""
    if not isinstance(response_url, str) or not response_url.startswith(("https://", "http://")):
        return  # the guarded client judges the rest (a private address only when allowed)
    try:
        async with guarded_client(allow=engine.settings.http_allow_list, timeout=TELL_SECONDS) as http:
            await http.post(response_url, json={"replace_original": True, "text": text})
    except Exception as exc:  # the guarded client's refusals and every transport failure
        logger.warning("could not update the Slack message (%s): %s", type(exc).__name__, exc)


def _payload(body: bytes) -> dict[str, Any]:
    try:
        found = json.loads(parse_qs(body.decode())["payload"][0])
    except (KeyError, IndexError, UnicodeDecodeError, ValueError):
        found = None
    if not isinstance(found, dict):
        raise ConfigError(
            "slack_payload_invalid",
            "a Slack callback is a form with a JSON 'payload'",
            solution="Point the Slack app's interactivity Request URL here.",
        )
    return found
