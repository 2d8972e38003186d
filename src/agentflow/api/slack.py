"""Slack's callbacks (issue 14): a button pressed on a request posted to Slack (``user_input``
channel ``slack``) answers it; a message in the thread of a request posted by the server's bot
is a free-text reply the workflow's model reads (Events API).

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
    body = await request.body()
    _verified(engine, body, timestamp, signature)
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
        found,
        token,
        approved=decision == "approve",
        response=None,
        reason=None,
        responded_by=f"slack:{who}",
        route="/api/public/slack/interactions",
    )
    await _tell_slack(engine, payload.get("response_url"), f"{answered['status'].capitalize()} by {who}.")
    return SlackAnswer(status=answered["status"], responded_by=answered["responded_by"])


class SlackEventAnswer(BaseModel):
    """What an Events API callback did (Slack only needs a 200 within three seconds)."""

    status: str = Field(description="kept (a reply to a request, read next), or ignored.")
    challenge: str | None = Field(default=None, description="Slack's url_verification challenge, echoed.")
    reply_id: uuid.UUID | None = None


@router.post(
    "/api/public/slack/events",
    response_model=SlackEventAnswer,
    response_model_exclude_none=True,
    summary="Slack Events API callback (replies in request threads)",
)
async def slack_event(
    request: Request,
    engine: EngineDep,
    timestamp: Annotated[str | None, Header(alias="X-Slack-Request-Timestamp", max_length=20)] = None,
    signature: Annotated[str | None, Header(alias="X-Slack-Signature", max_length=200)] = None,
) -> SlackEventAnswer:
    """Verify Slack's signature, then keep a message posted in the thread of a request's Slack
    message (posted by the server's bot) for the workflow's model to read. Answers Slack's
    ``url_verification`` challenge; anything else is ``ignored``. 404 ``slack_not_configured``
    without a signing secret; 401 ``slack_signature_invalid``; 422 ``slack_payload_invalid``."""
    body = await request.body()
    _verified(engine, body, timestamp, signature)
    try:
        payload = json.loads(body)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        raise ConfigError("slack_payload_invalid", "a Slack event is a JSON object",
                          solution="Point the Slack app's Event Subscriptions Request URL here.")  # fmt: skip
    if payload.get("type") == "url_verification":
        return SlackEventAnswer(status="verified", challenge=str(payload.get("challenge") or ""))
    event = payload.get("event")
    if (
        payload.get("type") != "event_callback"
        or not isinstance(event, dict)
        or event.get("type") != "message"
    ):
        return SlackEventAnswer(status="ignored")
    kept = await engine.replies.receive_slack(event)
    if kept is None:
        return SlackEventAnswer(status="ignored")
    return SlackEventAnswer(status="kept", reply_id=kept["id"])


def _verified(engine: Engine, body: bytes, timestamp: str | None, signature: str | None) -> None:
    """Refuse a callback that Slack did not sign with this server's signing secret."""
    secret = engine.settings.slack_signing_secret
    if secret is None:
        raise NotFoundError(
            "slack_not_configured",
            "this server takes no Slack callbacks",
            solution="Set AGENTFLOW_SLACK_SIGNING_SECRET to the Slack app's signing secret.",
        )
    if not signature_valid(secret.get_secret_value(), timestamp or "", body, signature or "", time.time()):
        raise AuthError(
            "slack_signature_invalid",
            "the callback is not signed with this server's Slack signing secret, or is too old",
            solution="Check AGENTFLOW_SLACK_SIGNING_SECRET against the Slack app's signing secret.",
        )


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
