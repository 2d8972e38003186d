"""The web console at ``/`` (files in ``agentflow.console``): a page that uses the public API.

The page is served with a Content-Security-Policy that allows only its own scripts, styles and
API calls (no inline script, no other origin), so data shown in it cannot run as code.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from agentflow.console import STATIC

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self';"
    " base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

HEADERS = {"Content-Security-Policy": CSP, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}

router = APIRouter(include_in_schema=False)


@router.get("/")
async def console() -> FileResponse:
    """The console's page."""
    return FileResponse(
        STATIC / "index.html",
        media_type="text/html",
        headers={
            "Content-Security-Policy": CSP,
            "Cache-Control": "no-cache",
            "X-Content-Type-Options": "nosniff",
        },
    )


@router.get("/answer")
async def answer_page() -> FileResponse:
    """The page an emailed link to a request opens (its token in the URL's fragment)."""
    return FileResponse(STATIC / "answer.html", media_type="text/html", headers=HEADERS)


def install(app: FastAPI) -> None:
    """Serve the console: the page at ``/``, its files under ``/console/``."""
    app.include_router(router)
    app.mount("/console", StaticFiles(directory=STATIC), name="console")
