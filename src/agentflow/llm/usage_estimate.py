"""Token counts without a tokenizer: for the scripted model, and for a streamed answer whose
server reports no usage (llama-cpp-python's, for one), so budgets still count what was spent."""

from __future__ import annotations

import json
import math
from typing import Any

from agentflow.core.chat import Message, ModelRequest, Usage


def estimate_usage(request: ModelRequest, reply: Message) -> Usage:
    """Tokens as ``ceil(characters / 4)``: a stable stand-in for a tokenizer.

    Input counts every request message's content and the tool schemas (as compact JSON);
    output counts the reply's content and its tool calls (as compact JSON). Nothing is cached.
    """
    schemas = sum(
        len(_compact({"name": t.name, "description": t.description, "parameters": t.parameters}))
        for t in request.tools
    )
    input_chars = sum(len(m.content) for m in request.messages) + schemas
    output_chars = len(reply.content) + sum(len(_compact(call.to_json())) for call in reply.tool_calls)
    return Usage(math.ceil(input_chars / 4), math.ceil(output_chars / 4), 0)


def _compact(doc: dict[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))
