"""The default scripted model: deterministic rules over the same context a real model reads.

Used when no model is configured (offline, the demo, tests). It reads the context the agent
loop builds (the triggering event, the run's tasks, new events, tool results) and answers with
tool calls, as a cautious model would: meeting transcripts become tasks from their action items,
churn-risk signals a get-well plan and its tasks, pricing concerns a notification to the account
owner; it waits while its tasks are open and completes when they are done. It only calls tools
the request offers. It answers the event gate by matching the workflow prompt's key words.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from agentflow.agent.gate import VERDICT_SCHEMA
from agentflow.core.chat import Message, ModelRequest, ToolCall
from agentflow.core.json_examples import example_of

_BLOCK = re.compile(r"```json\n(.*?)\n```", re.S)
_ACTION = re.compile(r"(?im)^\s*(?:[-*]\s*)?(?:action item|action|todo)\s*[:\-]\s*(.+)$")
_FIELD = re.compile(r"(?i)\b(owner|assignee|due|priority)\s*[:=]\s*([^;,|]+)")
_WORDS = re.compile(r"[a-z][a-z-]{4,}")
_STOP = {"start", "customers", "customer", "account", "accounts", "their", "about", "when", "with", "there",
         "which", "should", "workflow", "every", "after", "plan"}  # fmt: skip
CHURN = ("churn", "at risk", "at-risk", "health score", "cancel", "downgrade")
PRICING = ("pricing", "price", "discount", "too expensive", "budget cut", "cost")
EXPANSION = ("license limit", "seat limit", "out of seats", "licenses used", "expansion")


def respond(request: ModelRequest) -> Message:
    """The scripted model's next message for ``request``: the gate's verdict, a structured
    answer (a small value the schema accepts), a plain answer (no tools offered: an ``llm``
    node), or an agent's tool calls."""
    if request.output_schema == VERDICT_SCHEMA:
        return _gate(request)
    if request.output_schema is not None:
        return Message("assistant", orjson.dumps(example_of(request.output_schema)).decode())
    if not request.tools:
        said = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
        return Message("assistant", f"(scripted answer) {' '.join(said.split())[:300]}")
    tools = {t.name for t in request.tools}
    calls = [_with_data(request, name, args) for name, args in _decide(request, tools)]
    return Message(
        "assistant", "", tuple(ToolCall(f"call_{n}", name, args) for n, (name, args) in enumerate(calls))
    )


def _with_data(request: ModelRequest, name: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A ``complete`` call with the ``data`` its schema asks for (a small value that fits)."""
    if name != "complete" or "data" in args:
        return name, args
    offered = next((t for t in request.tools if t.name == "complete"), None)
    wanted = (offered.parameters.get("properties") or {}).get("data") if offered is not None else None
    return name, args if wanted is None else {**args, "data": example_of(wanted)}


def _decide(request: ModelRequest, tools: set[str]) -> list[tuple[str, dict[str, Any]]]:
    messages = request.messages
    made = [c.name for m in messages if m.role == "assistant" for c in m.tool_calls]
    system = messages[0].content if messages else ""
    tasks = _section(system, "## Tasks this run created")
    account = _section(system, "## Account") or {}
    if not made:
        return _first(request, tools, account)
    last = next(m for m in reversed(messages) if m.role == "assistant").tool_calls
    if last and last[0].name == "generate_plan" and "create_task" in tools:
        plan = _section(system, "## Current plan") or {}
        return _plan_tasks(plan, account) or [("complete", {"summary": "The plan had no steps to assign."})]
    if isinstance(tasks, list) and tasks:
        open_ = [t for t in tasks if t.get("status") in ("open", "in_progress")]
        if not open_:
            return [
                (
                    "complete",
                    {"summary": f"All {len(tasks)} tasks are done: " + "; ".join(t["title"] for t in tasks)},
                )
            ]
        if "wait" in tools:
            dues = sorted(t["due_at"] for t in open_ if t.get("due_at"))
            return [("wait", {"until": dues[-1], "wake_on_event": True} if dues else {"duration": "1d"})]
        return [("complete", {"summary": f"Created {len(tasks)} tasks; {len(open_)} still open."})]
    if "send_notification" in made:
        return [("complete", {"summary": "Notified the account owner."})]
    return [("complete", {"summary": "Nothing more to do."})]


def _first(
    request: ModelRequest, tools: set[str], account: dict[str, Any]
) -> list[tuple[str, dict[str, Any]]]:
    event = _section(request.messages[1].content, "## The event") if len(request.messages) > 1 else None
    event = event if isinstance(event, dict) else {}
    topic = str(event.get("topic") or "")
    found = event.get("data")
    data: dict[str, Any] = found if isinstance(found, dict) else {}
    text = _flatten(data).lower()
    name = account.get("name") or event.get("account_id") or "the account"
    if topic.startswith("meeting") or "transcript" in data:
        items = _action_items(str(data.get("transcript", "")), str(data.get("title", "the meeting")))
        if items and "create_task" in tools:
            account_id = event.get("account_id")
            return [
                ("create_task", {**item, "account_id": account_id} if account_id else item) for item in items
            ]
        return [("complete", {"summary": "The meeting had no action items."})]
    if any(w in text for w in CHURN) and "generate_plan" in tools:
        return [("generate_plan", {"scenario": "get well plan for churn risk"})]
    if any(w in text for w in EXPANSION) and "generate_plan" in tools:
        return [("generate_plan", {"scenario": "expansion at license limit"})]
    if any(w in text for w in PRICING) and "send_notification" in tools:
        quote = str(data.get("subject") or data.get("body") or "")[:300]
        message = f"{name} raised a pricing concern: {quote}\nPlease follow up with them."
        subject = f"Pricing concern from {name}"
        return [
            (
                "send_notification",
                {"channel": "email", "to": "account_owner", "subject": subject, "message": message},
            )
        ]
    return [("complete", {"summary": f"Nothing in this {topic or 'event'} needs action."})]


def _action_items(transcript: str, meeting: str) -> list[dict[str, Any]]:
    items = []
    for line in _ACTION.findall(transcript):
        fields = {k.lower(): v.strip() for k, v in _FIELD.findall(line)}
        title = re.split(r"(?i)[;,|—]\s*(?:owner|assignee|due|priority)\b|\s+—\s+", line)[0].strip(" .-—")
        item: dict[str, Any] = {
            "title": title[:300],
            "description": f"Action item from {meeting}: {line.strip()}",
        }
        if owner := fields.get("owner") or fields.get("assignee"):
            item["assignee"] = owner
        if due := fields.get("due"):
            item["due_in" if re.fullmatch(r"\d+\s*[smhdw]", due) else "due_at"] = due
        priority = fields.get("priority", "").lower()
        item["priority"] = priority if priority in ("low", "medium", "high", "urgent") else "medium"
        items.append(item)
    return items[:10]


def _plan_tasks(plan: dict[str, Any], account: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = plan.get("steps")
    steps: list[Any] = found if isinstance(found, list) else []
    calls = []
    title = plan.get("title") or plan.get("summary") or plan.get("scenario") or ""
    for n, step in enumerate(steps[:4]):
        args: dict[str, Any] = {
            "title": _first_sentence(str(step.get("action") or "Plan step"))[:300],
            "description": f"Step {step.get('n', n + 1)} of the plan ({title}): {step.get('action', '')}"[
                :5000
            ],
            "priority": "high" if n == 0 else "medium",
            "due_in": _due_in(step.get("due_in")),
        }
        if account.get("owner"):
            args["assignee"] = account["owner"]
        if account.get("id"):
            args["account_id"] = account["id"]
        calls.append(("create_task", args))
    return calls


def _first_sentence(text: str) -> str:
    return re.split(r"(?<=[a-z0-9)])\.\s", text, maxsplit=1)[0].rstrip(".")


def _due_in(text: Any) -> str:
    found = re.search(r"(\d+)\s*(hour|day|week)", str(text or ""))
    if not found:
        return "3d"
    return f"{found.group(1)}{found.group(2)[0]}"


def _gate(request: ModelRequest) -> Message:
    system = request.messages[0].content.lower()
    objective = system.split("## the workflow's objective", 1)[-1].split("answer with json", 1)[0]
    words = {w for w in _WORDS.findall(objective) if w not in _STOP}
    found = _section(request.messages[-1].content, "## Event")
    data = found.get("data") if isinstance(found, dict) else None
    event = _flatten(data).lower() if data is not None else request.messages[-1].content.lower()
    hits = sorted(w for w in words if w in event or w.rstrip("s") in event)
    start = bool(hits)
    reason = (
        f"the event mentions {', '.join(hits[:5])}, which the objective is about"
        if start
        else "nothing in the event matches the workflow's objective"
    )
    return Message("assistant", orjson.dumps({"start": start, "reason": f"scripted gate: {reason}"}).decode())


def _section(text: str, heading: str) -> Any:
    start = text.find(heading)
    if start < 0:
        return None
    found = _BLOCK.search(text, start)
    if not found:
        return None
    try:
        return orjson.loads(found.group(1))
    except orjson.JSONDecodeError:
        return None


def _flatten(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k} {_flatten(v)}" for k, v in value.items())
    if isinstance(value, list):
        return " ".join(_flatten(v) for v in value)
    return str(value)
