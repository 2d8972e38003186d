"""Requests to people: list them, read one, answer it (issue 14).

A graph's ``user_input`` node and an agent's tool approval both wait on a request row. An
answer is checked against what was asked (a form's JSON Schema, the options of a selection,
a yes or no for approvals and reviews) before it is recorded; the first valid answer wins and
resumes the run exactly once; a later one gets 409 naming who answered first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

from agentflow.core.errors import AgentflowError, AuthError, ConfigError, ConflictError, NotFoundError
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.link_tokens import REPLY_VIA, read_holder, token_hash
from agentflow.core.request_answers import checked_answer, edited_call, response_invalid
from agentflow.store import audit_log, requests
from agentflow.store.database import Database

STATUSES = ("pending", "approved", "rejected", "answered", "expired")
VIA = ("in_app", "email", "slack", "webhook", "api", "callback", "event")


class HumanRequests:
    """The requests of the engine's database."""

    def __init__(self, db: Database, decide_approval: Callable[..., Awaitable[Any]]) -> None:
        """``decide_approval``: how an agent's tool approval is decided (``Governance.decide``)."""
        self._db = db
        self._decide_approval = decide_approval

    async def list(
        self,
        *,
        status: str | None = None,
        assignee: str | None = None,
        workflow_id: UUID | None = None,
        run_id: UUID | None = None,
        limit: int = 100,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> list[dict[str, Any]]:
        """Requests, newest first (``assignee``: those this person may answer)."""
        return await requests.list_requests(
            self._db.pool, workspace_id, status=status, assignee=assignee, workflow_id=workflow_id,
            run_id=run_id, limit=limit,
        )  # fmt: skip

    async def get(self, request_id: UUID, *, workspace_id: UUID = DEFAULT_WORKSPACE) -> dict[str, Any]:
        """One request.

        Raises:
            NotFoundError: ``request_not_found``.
        """
        found = await requests.get_request(self._db.pool, workspace_id, request_id)
        if found is None:
            raise NotFoundError("request_not_found", f"no request {request_id} in this workspace")
        return found

    async def respond(
        self,
        request_id: UUID,
        *,
        approved: bool | None = None,
        response: Any = None,
        reason: str | None = None,
        responded_by: str | None = None,
        via: str = "in_app",
        workspace_id: UUID = DEFAULT_WORKSPACE,
        by_link: bool = False,
    ) -> dict[str, Any]:
        """Answer a pending request; its run goes on with the answer.

        Args:
            approved: for approvals and reviews: yes or no.
            response: an input's form, a selection's value, or a review's edited value.
            reason: why (a rejection's reason reaches the model of an agent).
            responded_by: who answers; must be an assignee when the request names any.
            via: the channel the answer came through.
            by_link: the answer came with a link's token, which the workflow gave to that
                person or channel: the assignees are not checked again.

        Raises:
            NotFoundError: ``request_not_found``.
            ConflictError: ``request_already_answered`` (with who answered first),
                ``request_expired``.
            ConfigError: ``response_invalid``, ``responder_not_assigned``.
        """
        request = await self.get(request_id, workspace_id=workspace_id)
        self._check_open(request)
        if request["assignees"] and responded_by not in request["assignees"] and not by_link:
            raise ConfigError(
                "responder_not_assigned",
                f"this request is for {', '.join(request['assignees'])}, not {responded_by or 'anonymous'}",
                solution="Answer as one of the assignees (responded_by).",
            )
        if request["node_id"] is None:  # an agent's tool approval: the same decision as ever
            if approved is None:
                raise response_invalid("an approval needs 'approved': true or false")
            edited = edited_call(request, response) if approved else None
            await self._decide_approval(
                request_id, approve=approved, reason=reason, decided_by=responded_by, edited=edited,
                via=via if via in VIA else "api", workspace_id=workspace_id,
            )  # fmt: skip
            return await self.get(request_id, workspace_id=workspace_id)
        status, outcome, value = checked_answer(request, approved, response)
        recorded = await requests.answer(
            self._db.pool, workspace_id, request_id, status=status, outcome=outcome, response=value,
            reason=reason, responded_by=responded_by, via=via if via in VIA else "api",
        )  # fmt: skip
        if not recorded:  # answered or expired meanwhile
            self._check_open(await self.get(request_id, workspace_id=workspace_id))
            raise ConflictError("request_changed", "the request changed meanwhile; look at it again")
        return await self.get(request_id, workspace_id=workspace_id)

    async def call_back(self, request_id: UUID, token: str, body: Any) -> dict[str, Any]:
        """Answer a ``wait_callback``'s request with ``body``, when ``token`` is its token.

        Raises:
            NotFoundError: ``callback_not_found`` (no such callback, or not this token: the
                two are not told apart).
            ConflictError: ``request_already_answered`` (a call came first), ``request_expired``.
        """
        found = await requests.find_by_link(self._db.pool, request_id, token_hash(token))
        if found is None or found["kind"] != "callback":
            raise NotFoundError(
                "callback_not_found",
                "no callback with this id and token",
                solution="Call the callback URL exactly as the run gave it, its token included.",
            )
        return await self.respond(
            request_id, response=body, responded_by="callback", via="callback",
            workspace_id=found["workspace_id"],
        )  # fmt: skip

    async def by_link(self, request_id: UUID, token: str) -> tuple[dict[str, Any], str, str]:
        """A request as its link shows it, to whom the link was given, and by which channel.

        Raises:
            AuthError: ``link_invalid`` (no such request, or not its link), ``link_expired``.
        """
        found = await requests.find_by_link(self._db.pool, request_id, token_hash(token))
        if (
            found is None
            or found["kind"] in ("callback", "event")
            or read_holder(str(found["holder"]))[0] == REPLY_VIA
        ):
            raise AuthError(
                "link_invalid",
                "this link does not answer any request",
                solution="Open the link exactly as it was given, or answer in the console's inbox.",
            )
        request = await self.get(request_id, workspace_id=found["workspace_id"])
        if (found["expired"] and request["status"] == "pending") or request["status"] == "expired":
            raise AuthError("link_expired", "this request timed out before it was answered")
        via, given_to = read_holder(str(found["holder"]))
        return request, given_to, via

    async def respond_by_link(
        self,
        request_id: UUID,
        token: str,
        *,
        approved: bool | None,
        response: Any,
        reason: str | None,
        responded_by: str | None = None,
        route: str = "/api/public/requests/{request_id}/respond",
    ) -> dict[str, Any]:
        """Answer a request through its link, as the person (or system) it was given to, or as
        ``responded_by`` (who pressed a Slack button), at ``route`` (the audit log's entry).

        The answer, or its refusal once the link is known good, is an entry of the workspace's
        audit log (``request.respond`` by actor ``link``, named after who answered), begun
        before the answer as for the API's routes; a forged or expired link names no workspace
        and is refused before.

        Raises:
            AuthError: ``link_invalid``, ``link_expired``.
            ConflictError: ``request_already_answered`` (with who answered first).
            ConfigError: ``response_invalid``.
        """
        request, given_to, via = await self.by_link(request_id, token)
        workspace_id, who = request["workspace_id"], responded_by or given_to
        entry = await audit_log.begin(
            self._db.pool, workspace_id, actor="link", actor_name=who, role="person",
            action="request.respond", method="POST", route=route,
            target={"request_id": str(request_id), "via": via},
        )  # fmt: skip
        status = 500
        try:
            answered = await self.respond(
                request_id, approved=approved, response=response, reason=reason,
                responded_by=who, via=via, workspace_id=workspace_id, by_link=True,
            )  # fmt: skip
            status = 200
            return answered
        except AgentflowError as exc:
            status = exc.status_code
            raise
        finally:
            await audit_log.finish(self._db.pool, workspace_id, entry, status=status, noted={})

    @staticmethod
    def _check_open(request: dict[str, Any]) -> None:
        if request["status"] != "pending":
            by = request["responded_by"] or "someone"
            raise ConflictError(
                "request_already_answered",
                f"this request was already {request['status']} by {by}",
                details={"status": request["status"], "responded_by": request["responded_by"],
                         "responded_at": str(request["responded_at"])},
            )  # fmt: skip
        if request["expired"]:
            raise ConflictError("request_expired", "this request timed out before it was answered")
