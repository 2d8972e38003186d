"""The node kinds as documents: what a builder, an editor or a person needs to use each.

``GET /api/node-kinds`` and ``agentflow nodes list`` serve these, so a form or a palette can
be generated from the backend rather than kept in step with it by hand.
"""

from __future__ import annotations

import inspect
from typing import Any

from agentflow.core.node_specs import ERROR_OUTPUT, ERROR_PORT, NodeSpec


def describe_kind(spec: type[NodeSpec]) -> dict[str, Any]:
    """One kind: its name, description, ports, whether it joins, whether it is pure (its step
    shares the next one's commit), whether it can be attached to an agent (or works only so),
    and JSON Schemas of its config, its input and its output on each port."""
    kind = spec.model_fields["type"].default
    doc = inspect.cleandoc(spec.__doc__ or "")
    ports = list(spec.port_names)
    return {
        "kind": kind,
        "title": spec.title or str(kind).replace("_", " ").capitalize(),
        "description": doc,
        "ports": ports,
        "config_ports": spec.config_ports,
        "joins": spec.joins,
        "pure": spec.pure,
        "attachable": spec.attachable,
        "attached_only": spec.attached_only,
        "config_schema": spec.model_json_schema(mode="validation"),
        "input_schema": spec.input_schema,
        "output_schemas": {port: _schema_of(spec, port) for port in ports},
    }


def _schema_of(spec: type[NodeSpec], port: str) -> dict[str, Any]:
    return ERROR_OUTPUT if port == ERROR_PORT else spec.result_schema


def describe_kinds(specs: dict[str, type[NodeSpec]]) -> list[dict[str, Any]]:
    """Every kind in ``specs``, by name."""
    return [describe_kind(specs[kind]) for kind in sorted(specs)]
