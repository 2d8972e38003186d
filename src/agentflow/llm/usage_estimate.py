"""Token counts without a tokenizer: for the scripted model, and for a streamed answer whose
server reports no usage (llama-cpp-python's, for one), so budgets still count what was spent."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

from agentflow.core.chat import Message, ModelRequest, ToolSchema, Usage
from agentflow.core.identity_memo import IdentityMemo


def estimate_usage(request: ModelRequest, reply: Message) -> Usage:
    """Tokens as ``ceil(characters / 4)``: a stable stand-in for a tokenizer.

    Input counts every request message's content and the tool schemas (as compact JSON);
    output counts the reply's content and its tool calls (as compact JSON). No input counts as
    cached.
    """
    schemas = sum(_schema_length(t) for t in request.tools)
    input_chars = sum(len(m.content) for m in request.messages) + schemas
    output_chars = len(reply.content) + sum(compact_length(call.to_json()) for call in reply.tool_calls)
    return Usage(math.ceil(input_chars / 4), math.ceil(output_chars / 4), 0)


def _length_of(tool: ToolSchema) -> int:
    return compact_length({"name": tool.name, "description": tool.description, "parameters": tool.parameters})


_schema_length = IdentityMemo(_length_of, limit=512)
"""Each tool schema's length: a worker offers the same few schema objects at every decision."""


def compact_length(doc: Any) -> int:
    """The length of ``doc`` as compact JSON with sorted keys and non-ASCII characters
    escaped (``json.dumps(doc, sort_keys=True, separators=(",", ":"))``).

    orjson writes it about ten times faster (a decision's tool schemas are counted at every
    call); the escapes it does not write are counted: six characters for a character of the
    Basic Multilingual Plane past ASCII or for DEL, twelve (a surrogate pair) beyond it.
    Floats are written alike but for some exponents (``1e-07`` against ``1e-7``) and NaN or
    infinities (``NaN`` against ``null``), a character or two; what orjson refuses (a key that
    is not a string, an integer past 64 bits) is written by ``json``.
    """
    try:
        text = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return len(json.dumps(doc, sort_keys=True, separators=(",", ":")))
    length = len(text)
    if not text.isascii():
        length += sum(5 if ord(c) < 0x10000 else 11 for c in text if ord(c) > 0x7F)
    return length + 5 * text.count("\x7f")
