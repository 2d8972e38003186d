"""Request and response bodies of the HTTP API (they make ``/openapi.json`` meaningful)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, computed_field

from agentflow.api.openapi import NO_NUL
from agentflow.api.run_schemas import Run as Run  # re-exported: routes import it from here

MAX_VERSION = 2**31 - 1


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class ErrorBody(BaseModel):
    """A structured error: match on ``code``; show ``message`` and ``solution`` to people."""

    code: str = Field(examples=["run_not_found"])
    message: str
    details: dict[str, Any] | None = None
    solution: str | None = None


class ErrorResponse(BaseModel):
    """The body of every error response."""

    error: ErrorBody


class Workflow(_Out):
    """A workflow: a name, a kind, flags and the number of its newest version."""

    id: UUID
    workspace_id: UUID
    name: str
    kind: str = Field(examples=["structured"])
    latest_version: int
    draft: bool
    enabled: bool
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None = Field(default=None, description="When it was archived (null: it is not).")


class GraphNode(BaseModel):
    """A node of a structured workflow's graph, as drawn."""

    id: str
    type: str = Field(examples=["condition"])
    ports: list[str] = Field(description="Its output ports.", examples=[["true", "false"]])
    attached_to: str | None = Field(
        default=None, description="The node it is attached to (an agent's tool or memory), if any."
    )


class GraphLink(BaseModel):
    """A link of the graph: from a node's port to a node."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    source: str = Field(alias="from")
    port: str
    to: str


class WorkflowGraph(BaseModel):
    """The graph the latest version of a structured workflow runs: its nodes and links (``next``,
    ``edges`` and list order resolved), and where a run starts."""

    nodes: list[GraphNode]
    links: list[GraphLink]
    entry: str | None


class WorkflowDetail(Workflow):
    """A workflow with the config of its latest version (and, for a structured one, its graph)."""

    config: dict[str, Any]
    content_hash: str
    graph: WorkflowGraph | None = None


class LastRun(BaseModel):
    """A workflow's newest run (a loop's items aside)."""

    id: UUID
    status: str
    created_at: datetime
    completed_at: datetime | None


class ListedWorkflow(Workflow):
    """A workflow in the list, with its newest run."""

    last_run: LastRun | None = Field(default=None, description="Its newest run; null: none yet.")


class WorkflowList(BaseModel):
    """Every workflow of the workspace, by name."""

    workflows: list[ListedWorkflow]


class Version(_Out):
    """An immutable config snapshot of a workflow."""

    workflow_id: UUID
    version: int
    config: dict[str, Any]
    content_hash: str
    created_at: datetime


class Published(BaseModel):
    """The outcome of publishing a config (``created`` is false when nothing changed)."""

    workflow: Workflow
    version: int
    content_hash: str
    created: bool


class Conversation(BaseModel):
    """The conversation a run answers: a chat thread, a ticket, an email exchange."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200, pattern=NO_NUL, examples=["T-4711"])
    channel: str = Field(
        pattern=r"^[a-z0-9][a-z0-9_.-]{0,49}$",
        examples=["slack"],
        description="slack, email, web, zendesk ...",
    )
    title: str | None = Field(default=None, min_length=1, max_length=300, pattern=NO_NUL)


class StartRun(BaseModel):
    """Start a run manually."""

    model_config = ConfigDict(extra="forbid")

    payload: Any = Field(default=None, description="The run's input (``{{ payload.x }}`` in templates).")
    state: dict[str, Any] | None = Field(
        default=None,
        description="Starting values of the run's variables (``{{ state.x }}``), checked against the"
        " workflow's ``state_definition``; variables not given take their defaults.",
    )
    version: int | None = Field(default=None, ge=1, le=MAX_VERSION, description="Pin a version.")
    enrollment_key: str | None = Field(
        default=None, min_length=1, max_length=500, description="At most one active run per key."
    )
    start_from_node: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="Start at this node instead of the first; ``inputs`` is its ``{{ input }}``.",
    )
    inputs: Any = Field(default=None, description="The ``{{ input }}`` of ``start_from_node``.")
    conversation: Conversation | None = Field(
        default=None, description="What the run answers; runs are listed by its id and channel."
    )
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="Or the `Idempotency-Key` header: at most one run per workflow and key; the same"
        " request again returns that run (200, `replayed`), another request with the key is a 409.",
    )


class StartedRun(Run):
    """The run a start made, or, for a start whose idempotency key was used before, that run."""

    replayed: bool = Field(
        default=False, description="True when an earlier start with the same idempotency key made it."
    )


class Step(_Out):
    """One attempt of one step of a run."""

    id: int
    seq: int
    attempt: int
    node_id: str | None
    kind: str
    name: str | None
    status: str
    input: Any
    output: Any
    error: dict[str, Any] | None
    idempotency_key: str
    worker: str | None
    fencing_token: int
    started_at: datetime
    finished_at: datetime
    duration_ms: float
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    usd_cost: Decimal
    model: str | None = Field(default=None, description="The model a decision step asked.")

    @computed_field(  # type: ignore[prop-decorator]
        description="The node execution this attempt belongs to (``run_id:step``): every attempt of"
        " it, on any worker, shares it; a loop item run's ``parent_activation_id`` points at one."
    )
    @property
    def activation_id(self) -> str:
        """The activation (one execution of one node) of this attempt."""
        return self.idempotency_key


class NodeSummary(BaseModel):
    """What one node of a structured run did."""

    status: str = Field(
        description="`completed`, `failed` (its last attempt) or `skipped` (a branch not taken)."
    )
    attempts: int
    runs: int = Field(description="Completed executions (more than one when several branches lead to it).")
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: float | None = Field(default=None, description="The sum of its attempts.")


class TreeUsage(BaseModel):
    """Model use of a run and of every run it started, however deep (loop items, agent nodes,
    child workflows)."""

    runs: int = Field(description="The runs counted: this one and those it started.")
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    usd_cost: Decimal


class RunDetail(Run):
    """A run with its step timeline (every attempt, in order), for a structured run a summary
    per node, and the usage of the run with every run it started."""

    steps: list[Step]
    nodes: dict[str, NodeSummary] = Field(default_factory=dict)
    total_usage: TreeUsage | None = Field(
        default=None, description="This run's model use plus that of every run it started."
    )


class RunList(BaseModel):
    """Runs, newest first; pass ``next_before`` as ``before`` for the next page."""

    runs: list[Run]
    next_before: UUID | None


class Health(BaseModel):
    """Liveness or readiness."""

    status: str = Field(examples=["ok"])


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorResponse, "description": description}


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _error(
        "Malformed request: `invalid_json`, `too_deep`, `unstorable_text`, `number_out_of_range` (the"
        " body), `unstorable_text` or `invalid_utf8` (the URL), `invalid_workspace` (the header)"
    ),
    401: _error(
        "`unauthorized`: a missing, malformed or revoked key (or a bad webhook signature), or no key"
        " on a request a proxy relayed"
    ),
    403: _error(
        "`workspace_mismatch`: the API key belongs to another workspace; `cross_origin_request`: a"
        " web page on another origin may not change anything"
    ),
    404: _error(
        "Unknown (or malformed) id in this workspace; `workspace_not_found`: X-Agentflow-Workspace"
        " names no workspace"
    ),
    413: _error("`body_too_large`: the body is over 1 MiB"),
    415: _error("`unsupported_media_type`: the body is not JSON"),
    422: _error(
        "`invalid_request`, `config_invalid`, `payload_invalid` or `state_invalid`:"
        " `details.errors` lists each path"
    ),
    500: _error("`internal_error`: a bug; the details are in the server log"),
    503: _error("`database_unavailable`: retry after the `Retry-After` seconds"),
}
"""The error responses every API route documents (``agentflow.api.openapi`` adds the middleware's)."""


def conflict(codes: str) -> dict[int | str, dict[str, Any]]:
    """The 409 response of a route whose request can conflict with the current state."""
    return {409: _error(f"Conflicts with the current state: {codes}")}
