"""B1: schemathesis over the OpenAPI document finds no server error and no conformance failure.

The engine behind ``st run`` (examples, coverage, fuzzing and stateful phases; every check,
response time included) runs in a thread against a real uvicorn server on the test's loop
and database, once with keys optional (loopback mode, every phase) and once with keys
required and one sent (without the coverage phase, see ``run_schemathesis``). The seed is
fixed and generation deterministic, so a failure reproduces; the figures (operations, cases,
failures, seconds) are printed, recorded as test properties, and appended as JSON lines to
the file ``AGENTFLOW_SCHEMATHESIS_FIGURES`` names, if set.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import pytest
import schemathesis
from hypothesis import strategies as st
from schemathesis.engine import events
from schemathesis.engine.statistic import Statistic

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.api import compat_v2
from agentflow.api.app import create_app
from agentflow.engine import Engine
from agentflow.runtime.metrics import REGISTRY
from tests.support.http_server import serve

SEED = 20260601
MAX_EXAMPLES = 6
"""Cases per operation in the fuzzing phase (and stateful steps) of the run with the coverage phase."""
MAX_EXAMPLES_WITHOUT_COVERAGE = 12
"""The same, in the run without it. Together the two runs take about 1.5 minutes on 2 cores
without coverage measurement (twice that with it, beside the other lanes)."""

FLOW = {
    "name": "greet",
    "kind": "structured",
    "nodes": [
        {"id": "hello", "type": "tool", "tool": "echo", "args": {"value": "{{ payload.name }}"}},
        {"id": "done", "type": "finish"},
    ],
}


# Operations whose input the engine validates beyond what JSON Schema can state: free-form
# JSON (payloads, event data, attributes, metadata) must fit PostgreSQL (64-bit integers, no
# NUL: 400 `number_out_of_range`, `unstorable_text`), and configs, payloads, events, documents,
# queries, report periods, answers to requests (through the API, a link or seed 001's resume),
# people (handles, roles) and credentials (a token URL that does not parse, a header the HTTP
# client owns) have meaning (422 `config_invalid`, `payload_invalid`,
# `event_invalid`, `knowledge_invalid`, `knowledge_query_invalid`, `account_query_invalid`,
# `report_period_invalid`...). For these, a schema-valid request may get those documented
# answers; every other check, and every other operation, keeps schemathesis's defaults.
SEMANTIC: dict[str, list[int]] = {
    "POST /api/ai/workflows": [400, 422],
    "POST /api/ai/workflows/{workflow_id}/runs": [400, 422],
    "POST /api/events": [400, 422],
    "POST /api/knowledge": [400, 422],
    "GET /api/knowledge/search": [422],
    "GET /api/knowledge/plan": [422],
    "GET /api/accounts": [422],
    "GET /api/accounts/{account_id}/events": [422],
    "GET /api/tasks": [422],
    "GET /api/reports/impact": [422],
    "GET /api/reports/activity": [422],
    "GET /api/ai/workflows/{workflow}/report": [422],
    "PUT /api/accounts/{account_id}": [400, 422],
    "PATCH /api/tasks/{task_id}": [400, 422],
    "POST /api/requests/{request_id}/respond": [400, 422],
    "POST /api/private/trigger/{workflow_id}": [400, 422],
    "POST /api/public/trigger/{workflow_id}": [400, 422],
    "POST /api/public/trigger/{public_api_key}/{workflow_id}": [400, 422],
    "POST /api/credentials": [422],
    "PUT /api/credentials/{name}": [422],
    "POST /api/public/requests/{request_id}/respond": [400, 422],
    "POST /api/public/inbound/email": [422],  # a string is a schema-valid email; most are unreadable
    "PUT /api/people/{handle}": [422],
    "POST /v2/workflows/{workflow_id}/execute": [400, 422],
    "POST /v2/executions/{execution_id}/resume": [400, 422],
    "GET /api/public/oauth2/callback": [400],  # the provider's refusal, or no code and state
}
NOT_FUZZED = [
    "GET /api/ai/workflows/{workflow_id}/runs/{run_id}/stream",
    "GET /api/runs/{run_id}/stream",
    "GET /api/runs/stream",
]
"""Operations schemathesis does not send: a run's event stream stays open while the run lives
(runs here never end: no worker), and a run list's for ten minutes, so every case would wait out
the request timeout. tests/integration/test_run_stream.py, test_run_events_stream.py and
test_run_list_stream.py follow streams to their runs' ends, and their 404s and 422s."""
REPLIES = st.one_of(
    st.binary(max_size=400),
    st.builds(
        lambda to, words: f"From: lee@example.com\r\nTo: {to}\r\nSubject: Re\r\n\r\n{words}".encode(),
        st.one_of(
            st.text(max_size=60), st.just("replies+aaaaaaaaaaaaaaaaaaaaaaaaaa.bbbbbbbbbbbbbbbbbbbbbbbb@x.co")
        ),
        st.text(max_size=200),
    ),
)
"""Raw emails for ``POST /api/public/inbound/email`` (``message/rfc822``): noise, and replies to
reply addresses that exist or not."""
schemathesis.openapi.media_type("message/rfc822", REPLIES)
SYNC_WAIT = 1.0
"""How long a synchronous v2 execute waits here: no worker runs its run, so each such case would
otherwise wait out its ``timeout_seconds`` (30 s by default) and the response time check."""
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429"]
"""positive_data_acceptance's default expected statuses, without its tolerance of 5xx."""


@dataclass
class Figures:
    """What one run did."""

    auth: str
    operations: int = 0
    operations_tested: int = 0
    cases: int = 0
    failures: int = 0
    errored_cases: int = 0
    seconds: float = 0.0
    stop_reason: str = ""
    server_errors_counted: float = 0.0
    refused_by_http_server: int = 0
    phases: dict[str, list[float]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


REJECTED = ["400", "401", "403", "404", "405", "406", "409", "415", "421", "422", "428", "429", "5xx"]
"""What may answer a request that breaks the schema (schemathesis's defaults and 421)."""


def run_schemathesis(base_url: str, headers: dict[str, str], auth: str, *, coverage: bool) -> Figures:
    """The ``st run`` engine over ``base_url``'s OpenAPI document, with every check.

    ``coverage``: run the coverage phase (boundary and negative values of every parameter,
    undocumented methods). Its ~1,500 cases do not depend on the auth mode, so one of the two
    runs has it; the other runs examples, fuzzing and stateful sequences only, with more
    examples each, which is where auth shows (``ignored_auth``, ``missing_required_header``).
    """
    config = schemathesis.Config.from_dict(
        {
            "phases": {"coverage": {"enabled": coverage}},
            "seed": SEED,
            "headers": headers,
            "base-url": base_url,
            "generation": {
                "mode": "all",
                "max-examples": MAX_EXAMPLES if coverage else MAX_EXAMPLES_WITHOUT_COVERAGE,
                "deterministic": True,
            },
            "checks": {
                "enabled": True,
                "max_response_time": 10.0,
                "positive_data_acceptance": {"expected-statuses": ACCEPTED},
                # schemathesis's own list, and 421: a request whose Host is no name this server
                # answers (the fuzzer sends an empty one) is refused before its parameters are read.
                "negative_data_rejection": {"expected-statuses": REJECTED},
            },
            "operations": [
                {
                    "include-name": name,
                    "checks": {
                        "positive_data_acceptance": {"expected-statuses": [*ACCEPTED, *map(str, statuses)]}
                    },
                }
                for name, statuses in SEMANTIC.items()
            ]
            + [{"include-name": name, "enabled": False} for name in NOT_FUZZED],
            "request-timeout": 30,
        }
    )
    # The loader's own read timeout is 10 s; FastAPI builds the document on its first request,
    # which took longer than that while CI's three lanes started on a slow CPU.
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json", config=config, timeout=60)
    figures = Figures(auth=auth, operations=len(list(schema.get_all_operations())))
    statistic = Statistic()
    started = time.monotonic()
    for event in schemathesis.engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            statistic.on_scenario_finished(event.recorder)
            cases, seconds = figures.phases.get(str(event.phase), [0, 0.0])
            figures.phases[str(event.phase)] = [
                cases + len(event.recorder.cases),
                round(seconds + event.elapsed_time, 1),
            ]
        elif isinstance(event, events.NonFatalError):
            figures.problems.append(f"error in {event.label}: {event.info.message}")
        elif isinstance(event, events.FatalError):
            figures.problems.append(f"fatal: {event.exception!r}")
        elif isinstance(event, events.EngineFinished):
            figures.stop_reason = str(event.stop_reason)
    figures.seconds = round(time.monotonic() - started, 1)
    figures.operations_tested = len(statistic.tested_operations)
    figures.cases = statistic.total_cases
    figures.failures = statistic.total_failures  # less the HTTP server's own refusals, below
    figures.errored_cases = statistic.errored_cases
    for label, groups in statistic.failures.items():
        for group in groups.values():
            if _refused_by_http_server(group.response):
                figures.refused_by_http_server += len(group.failures)
                figures.failures -= len(group.failures)
                continue
            status = group.response.status_code if group.response is not None else None
            sample = (group.code_sample or "")[:300]
            for failure in group.failures:
                figures.problems.append(
                    f"{label}: {failure.title} (got {status}): {failure.message[:300]} [{sample}]"
                )
    return figures


def _refused_by_http_server(response: Any) -> bool:
    """uvicorn's own answer to a request that is not valid HTTP (the fuzzer once sent a
    ``Transfer-Encoding: ,J5``): a plain-text 400 before the application sees the request,
    which no operation of the API can document."""
    return (
        response is not None
        and response.status_code == 400
        and response.text_lossy().startswith("Invalid HTTP request received.")
    )


def internal_errors() -> float:
    return REGISTRY.get_sample_value("agentflow_http_internal_errors_total") or 0.0


async def check_api(
    engine: Engine,
    auth: Literal["optional", "required"],
    coverage: bool,
    headers: Callable[[], Any],
    record_property: Callable[[str, object], None],
) -> None:
    await engine.publish_workflow(FLOW)
    compat_v2.SYNC_WAIT_LIMIT = SYNC_WAIT
    before = internal_errors()
    async with serve(create_app(engine, auth=auth)) as base:
        figures = await asyncio.to_thread(run_schemathesis, base, await headers(), auth, coverage=coverage)
    compat_v2.SYNC_WAIT_LIMIT = compat_v2.MAX_WAIT
    figures.server_errors_counted = internal_errors() - before
    print(f"\nschemathesis ({auth}): {json.dumps(asdict(figures), indent=1)}")
    if os.environ.get("AGENTFLOW_SCHEMATHESIS_FIGURES"):  # a file to keep the figures in
        with open(os.environ["AGENTFLOW_SCHEMATHESIS_FIGURES"], "a", encoding="utf-8") as out:
            out.write(json.dumps(asdict(figures)) + "\n")
    for name, value in asdict(figures).items():
        record_property(f"schemathesis_{auth}_{name}", value)
    assert figures.problems == [], "\n".join(figures.problems[:40])
    assert figures.failures == 0 and figures.server_errors_counted == 0
    assert figures.operations_tested == figures.operations, "every operation was exercised"
    assert figures.cases >= figures.operations * 5
    assert figures.stop_reason == "completed"


# About 45 s on an idle 2-core machine without coverage measurement; a loaded one takes longer,
# and a run cut off by the timeout would leave schemathesis threads calling an engine the next
# test no longer has.
@pytest.mark.timeout(420)
async def test_schemathesis_keys_optional(
    engine: Engine, record_property: Callable[[str, object], None]
) -> None:
    async def no_headers() -> dict[str, str]:
        return {}

    await check_api(engine, "optional", True, no_headers, record_property)


@pytest.mark.timeout(300)
async def test_schemathesis_keys_required(
    engine: Engine, record_property: Callable[[str, object], None]
) -> None:
    async def bearer() -> dict[str, str]:
        _, token = await engine.keys.create("api", "schemathesis")
        return {"Authorization": f"Bearer {token}"}

    await check_api(engine, "required", False, bearer, record_property)
