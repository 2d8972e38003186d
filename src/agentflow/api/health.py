"""``/healthz`` (the process is alive) and ``/readyz`` (it can reach the database)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from agentflow.api.deps import EngineDep
from agentflow.api.errors import unavailable_response
from agentflow.api.schemas import ERROR_RESPONSES, Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="Liveness")
async def healthz() -> Health:
    """200 while the process serves requests; touches no database."""
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Health,
    summary="Readiness",
    responses={503: ERROR_RESPONSES[503]},
)
async def readyz(engine: EngineDep) -> Health | JSONResponse:
    """200 when the database answers within two seconds, else 503 with ``Retry-After``."""
    if await engine.db.ping():
        return Health(status="ready")
    return unavailable_response("the database does not answer")
