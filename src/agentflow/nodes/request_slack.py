"""A request to people posted to Slack (``user_input`` channel ``slack``): the message, and
buttons that answer it.

The message goes to the node's ``slack`` incoming webhook, or with the server's Slack bot to the
channel ``slack`` names (then a reply in the message's thread is read by the workflow's model,
``agentflow.runtime.reply_reader``), through the outbox (written with the step, delivered at
least once). Approvals and reviews get *Approve* and *Reject* buttons whose
value carries the request's id and a single-use token (of which the request keeps the hash,
held by ``slack:<origin>``); every kind gets an *Open* button to the answer page. A press comes
back to ``/api/public/slack/interactions``, signed with the Slack app's signing secret
(``agentflow.api.slack``), and answers the request as the person who pressed it.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from agentflow.core.errors import StepFailure
from agentflow.core.graph.action_nodes import rendered_url_problem
from agentflow.core.graph.human_nodes import UserInputNode, is_slack_channel
from agentflow.core.link_tokens import ANSWER_PAGE, holder, new_token, token_hash
from agentflow.core.step_context import StepContext
from agentflow.integrations.http_errors import origin_of
from agentflow.nodes.base import NodeEnv

DECISIONS = ("approval", "review")


def button_value(request_id: str, token: str, decision: str) -> str:
    """What a button sends back: ``<request id>|<token>|<approve or reject>``."""
    return f"{request_id}|{token}|{decision}"


def read_button(value: str) -> tuple[str, str, str] | None:
    """``(request id, token, decision)`` of a button's value, or None for another button."""
    parts = value.split("|")
    if len(parts) != 3 or parts[2] not in ("approve", "reject"):
        return None
    return parts[0], parts[1], parts[2]


async def slack_message(
    node: UserInputNode, request: dict[str, Any], ctx: StepContext, env: NodeEnv
) -> dict[str, Any]:
    """The outbox's Slack notification for ``request``; its token's hash joins ``link_tokens``.

    Raises:
        StepFailure: ``request_slack_invalid`` when ``slack`` renders to no http(s) URL.
    """
    assert node.slack is not None
    url = str(await env.render(node.slack, node.id, "slack")).strip()
    bot = is_slack_channel(url)
    problem = None if bot else rendered_url_problem(url)
    if problem is not None:
        raise StepFailure(
            "request_slack_invalid",
            f"user_input {node.id!r} field slack: {problem}",
            retryable=False,
            details={"node": node.id, "field": "slack"},
            solution="Make 'slack' render to the Slack incoming webhook URL of the channel to ask in,"
            " or to a channel (#approvals) for the server's Slack bot.",
        )
    # The path of a Slack webhook URL is its secret; a channel is only a name.
    shown = url if bot else origin_of(httpx.URL(url))
    token = new_token()
    request["link_tokens"] = {**request.get("link_tokens", {}), token_hash(token): holder("slack", shown)}
    rid = request["id"]
    buttons: list[dict[str, Any]] = []
    if request["kind"] in DECISIONS:
        buttons += [
            _button("Approve", "approve", button_value(rid, token, "approve"), "primary"),
            _button("Reject", "reject", button_value(rid, token, "reject"), "danger"),
        ]
    open_link = {
        "type": "button",
        "action_id": "open",
        "text": {"type": "plain_text", "text": "Open"},
        "url": f"{env.public_url}{ANSWER_PAGE}#request={rid}&token={token}",
    }
    blocks = [
        {"type": "section", "text": {"type": "plain_text", "text": request["message"][:3000]}},
        {"type": "actions", "block_id": "agentflow_request", "elements": [*buttons, open_link]},
    ]
    return {
        "id": str(uuid.uuid5(ctx.run_id, f"request-slack:{rid}")),
        "channel": "slack",
        "recipient": shown,
        "subject": None,
        "body": request["message"],
        "kind": "request",
        "metadata": {
            ("slack_channel" if bot else "slack_webhook_url"): url,
            "blocks": blocks,
            "workflow_id": str(ctx.workflow_id),
            "request_id": rid,
        },
    }


def _button(text: str, action: str, value: str, style: str) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": action,
        "text": {"type": "plain_text", "text": text},
        "value": value,
        "style": style,
    }
