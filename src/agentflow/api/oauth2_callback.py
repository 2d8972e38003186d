"""``/api/public/oauth2/callback``: where an OAuth2 provider sends a person back after consent
(issue 13). No API key: the single-use ``state`` names the consent agentflow started
(``agentflow.oauth2_consents``). A person's browser lands here, so the answer is a small page;
nothing in it comes from the request but escaped text.
"""

from __future__ import annotations

import html
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from agentflow.api.console import CSP
from agentflow.api.deps import EngineDep
from agentflow.api.schemas import ERROR_RESPONSES
from agentflow.core.errors import AgentflowError

router = APIRouter(tags=["credentials"])
ERROR_SCHEMA = "#/components/schemas/ErrorResponse"
PAGE_OR_ERROR: dict[int | str, dict[str, Any]] = {
    status: {
        "description": f"{about['description']} (a page from this route; JSON from the API's guards)",
        "content": {
            "text/html": {},
            "application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}},
        },
    }
    for status, about in ERROR_RESPONSES.items()
}
"""Each error status as a page (this route's answers) or the API's JSON error (its guards')."""


@router.get(
    "/api/public/oauth2/callback",
    response_class=HTMLResponse,
    summary="OAuth2 consent callback (the provider redirects the person here)",
    responses=PAGE_OR_ERROR,
)
async def oauth2_callback_page(
    engine: EngineDep,
    code: Annotated[str | None, Query(max_length=4096)] = None,
    state: Annotated[str | None, Query(max_length=200)] = None,
    error: Annotated[str | None, Query(max_length=200)] = None,
    error_description: Annotated[str | None, Query(max_length=1000)] = None,
) -> HTMLResponse:
    """Exchange the code for the consent ``state`` names and store the tokens; a page says how
    it went: 200 connected, 400 refused at the provider or a request without a code, 401 an
    unknown, used or expired state, or the exchange's own error status."""
    if error is not None:
        why = error if error_description is None else f"{error}: {error_description}"
        return _page(400, "Not connected", f"The provider refused: {why}.")
    if not code or not state:
        return _page(400, "Not connected", "The provider sent no code or no state back.")
    try:
        record = await engine.consents.finish(state, code)
    except AgentflowError as exc:
        return _page(exc.status_code, "Not connected", f"{exc.info.code}: {exc.info.message}")
    return _page(200, "Connected", f"Credential {record.name} is connected. You can close this window.")


def _page(status: int, title: str, text: str) -> HTMLResponse:
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>'
        f"{html.escape(title)} · agentflow</title></head><body><h1>{html.escape(title)}</h1>"
        f'<p id="outcome">{html.escape(text)}</p></body></html>'
    )
    headers = {"Content-Security-Policy": CSP, "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
    return HTMLResponse(body, status_code=status, headers=headers)
