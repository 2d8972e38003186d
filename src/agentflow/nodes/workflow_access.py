"""Workflows as ``run_workflow`` steps find them: by name, at a version or the latest, checked
before a child run of one is started.

Failures are :class:`~agentflow.core.errors.StepFailure` codes with a solution, none retryable
(the answer would not change on a second attempt): ``child_workflow_not_found``,
``child_version_not_found``, ``child_workflow_draft``.
"""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

import asyncpg

from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.errors import ConfigError, StepFailure
from agentflow.core.frozen import frozen
from agentflow.core.graph.child_nodes import RunWorkflowNode
from agentflow.core.graph.employee_nodes import RunEmployeeNode
from agentflow.core.records import VersionRecord
from agentflow.store import reads, workflows

Parse = Callable[[VersionRecord], AgentConfig | StructuredConfig]


@frozen
class Callee:
    """A workflow version a run may start a child of."""

    workflow_id: UUID
    name: str
    version: int
    config: AgentConfig | StructuredConfig


class WorkflowAccess:
    """Look up the workflows of a workspace for the steps of one worker.

    Args:
        pool: the database pool.
        parse: a version record's parsed config (the worker's cache of them).
    """

    def __init__(self, pool: asyncpg.Pool, parse: Parse) -> None:
        self._pool = pool
        self._parse = parse

    async def callee(self, workspace_id: UUID, name: str, version: int | None, node: str) -> Callee:
        """The workflow ``name`` at ``version`` (None: its latest).

        Raises:
            StepFailure: the workflow or version does not exist, or the workflow is a draft.
        """
        found = await workflows.get_by_name(self._pool, workspace_id, name)
        if found is None:
            raise StepFailure(
                "child_workflow_not_found",
                f"run_workflow {node!r}: this workspace has no workflow named {name!r}",
                details={"node": node, "workflow": name},
                solution="Create and publish that workflow, or fix the node's 'workflow'.",
            )
        if found.archived_at is not None:
            raise StepFailure(
                "child_workflow_archived",
                f"run_workflow {node!r}: workflow {name!r} is archived",
                details={"node": node, "workflow": name},
                solution="Unarchive the workflow, or change the node to run another.",
            )
        if found.draft:
            raise StepFailure(
                "child_workflow_draft",
                f"run_workflow {node!r}: workflow {name!r} is a draft",
                details={"node": node, "workflow": name},
                solution="Publish the workflow (clear its draft flag) before other runs start it.",
            )
        wanted = found.latest_version if version is None else version
        record = await workflows.get_version(self._pool, workspace_id, found.id, wanted)
        if record is None:
            raise StepFailure(
                "child_version_not_found",
                f"run_workflow {node!r}: workflow {name!r} has no version {wanted}"
                f" (its latest is {found.latest_version})",
                details={"node": node, "workflow": name, "version": wanted, "latest": found.latest_version},
                solution="Name an existing version, or leave 'version' out for the latest.",
            )
        return Callee(found.id, found.name, record.version, self._parse(record))

    async def depth(self, workspace_id: UUID, run_id: UUID, limit: int) -> int:
        """How many runs ``run_id`` is nested in, counted up to ``limit``."""
        return await reads.nesting_depth(self._pool, workspace_id, run_id, limit)


async def may_start_child(
    access: WorkflowAccess | None, workspace_id: UUID, run_id: UUID, kind: str, node: str, max_depth: int
) -> WorkflowAccess:
    """The workspace's workflows, when a ``kind`` node (``run_workflow``, ``run_employee``) of a
    run nested less than ``max_depth`` deep may start a child.

    Raises:
        StepFailure: ``run_workflow_unavailable`` (a worker without access) or
            ``run_depth_exceeded``, neither retryable.
    """
    if access is None:
        raise StepFailure(
            "run_workflow_unavailable",
            f"{kind} {node!r}: this worker cannot start child runs",
            retryable=False,
            solution="Run the workflow on an agentflow worker (agentflow worker).",
        )
    depth = await access.depth(workspace_id, run_id, max_depth)
    if depth >= max_depth:
        raise StepFailure(
            "run_depth_exceeded",
            f"{kind} {node!r}: this run is nested {depth} runs deep, and max_depth is {max_depth}",
            retryable=False,
            details={"node": node, "depth": depth, "max_depth": max_depth},
            solution="Stop the recursion (a condition before the node), or raise max_depth.",
        )
    return access


async def refuse_unknown_children(pool: asyncpg.Pool, workspace_id: UUID, config: StructuredConfig) -> None:
    """Refuse, at publish, ``run_workflow`` nodes whose workflow is missing (other than the one
    being published, which may run itself), a draft, or lacks the pinned version.

    Raises:
        ConfigError: ``config_invalid``, naming each node's ``workflow`` or ``version``.
    """
    errors: list[dict[str, str]] = []
    for index, node in enumerate(config.nodes):
        if isinstance(node, RunEmployeeNode):
            errors += await _employee_problems(pool, workspace_id, node, f"nodes[{index}].employee")
        if not isinstance(node, RunWorkflowNode) or node.workflow == config.name:
            continue
        found = await workflows.get_by_name(pool, workspace_id, node.workflow)
        name, where = node.workflow, f"nodes[{index}]"
        if found is None:
            errors.append({"path": f"{where}.workflow", "message": f"no workflow named {name!r} here"})
        elif found.draft:
            errors.append({"path": f"{where}.workflow", "message": f"workflow {name!r} is a draft"})
        elif node.version is not None and node.version > found.latest_version:
            latest = found.latest_version
            message = f"workflow {name!r} has no version {node.version} (its latest is {latest})"
            errors.append({"path": f"{where}.version", "message": message})
    if errors:
        raise ConfigError(
            "config_invalid",
            f"{errors[0]['path']}: {errors[0]['message']}",
            details={"errors": errors},
            solution="Publish what run_workflow and run_employee nodes start first (not as drafts).",
        )


async def _employee_problems(
    pool: asyncpg.Pool, workspace_id: UUID, node: RunEmployeeNode, path: str
) -> list[dict[str, str]]:
    found = await workflows.get_by_name(pool, workspace_id, node.employee)
    if found is None:
        return [{"path": path, "message": f"no employee named {node.employee!r} here"}]
    if found.kind != "employee":
        return [
            {
                "path": path,
                "message": f"{node.employee!r} is a workflow of kind {found.kind}, not an employee",
            }
        ]
    if found.draft:
        return [{"path": path, "message": f"employee {node.employee!r} is a draft"}]
    return []
