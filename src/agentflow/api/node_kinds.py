"""``/api/node-kinds``: every node kind a structured workflow can use, with JSON Schemas."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from agentflow.api.deps import WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES
from agentflow.nodes.registry import node_kinds

router = APIRouter(prefix="/api/node-kinds", tags=["workflows"], responses={**ERROR_RESPONSES})


class NodeKind(BaseModel):
    """One node kind, for a builder or an editor."""

    kind: str = Field(examples=["tool"])
    title: str = Field(examples=["Tool"])
    description: str
    ports: list[str] = Field(description="Output ports an edge may leave by (`from`, `port`).")
    config_ports: str | None = Field(
        description="Where a node's config names further ports (`branches[].port`), else null."
    )
    joins: bool = Field(
        description="True: one execution waits for every live incoming edge and sees `input` by "
        "predecessor id. False: the node runs once for each incoming edge that fires."
    )
    pure: bool = Field(
        default=False,
        description="True: the node only computes its output from what it reads; its step is "
        "written in the same commit as the next step's (it costs no commit of its own).",
    )
    config_schema: dict[str, Any] = Field(description="JSON Schema of the node's config, with defaults.")
    input_schema: dict[str, Any] = Field(description="JSON Schema of the `input` it can use ({}: any).")
    output_schemas: dict[str, dict[str, Any]] = Field(
        description="JSON Schema of what each port carries ({}: not known before it runs)."
    )


class NodeKindList(BaseModel):
    """The node kinds, by name."""

    node_kinds: list[NodeKind]


@router.get("", response_model=NodeKindList, summary="List node kinds")
async def list_node_kinds(workspace: WorkspaceDep) -> NodeKindList:
    """Every node kind this server can run, with its config, input and output schemas."""
    del workspace  # authenticated like every route; the kinds are the same in every workspace
    return NodeKindList(node_kinds=[NodeKind.model_validate(kind) for kind in node_kinds()])
