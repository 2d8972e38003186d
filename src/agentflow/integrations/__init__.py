"""Outbound integrations: the guarded HTTP client, email over SMTP, Slack and webhooks.

Every workspace-controlled URL goes through :func:`guarded_client` (an httpx client) or,
for model SDKs built on httpx2, :func:`guarded_sdk_client`; see ``guarded_http`` for what
they enforce.
"""

from agentflow.integrations.destinations import Resolver, resolve_with_system
from agentflow.integrations.email import EmailSender
from agentflow.integrations.guarded_http import guarded_client
from agentflow.integrations.http_errors import BlockedDestination, RequestDeadlineExceeded, ResponseTooLarge
from agentflow.integrations.sdk_http import guarded_sdk_client
from agentflow.integrations.slack import post_slack, post_webhook

__all__ = [
    "BlockedDestination",
    "EmailSender",
    "RequestDeadlineExceeded",
    "Resolver",
    "ResponseTooLarge",
    "guarded_client",
    "guarded_sdk_client",
    "post_slack",
    "post_webhook",
    "resolve_with_system",
]
