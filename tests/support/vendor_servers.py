"""Local HTTP servers that speak the model vendors' wire protocols, for the provider tests.

The real SDKs talk real HTTP to a Starlette app under uvicorn (127.0.0.1, port 0, the test's
event loop). The server answers with the replies a test queued, in order, and records every
request (path, headers, JSON body, arrival time on the test's monotonic clock) so the test
can check what the SDK sent: tools, messages and tool results in the vendor's own format.

The reply builders below write the vendors' JSON: OpenAI chat completions, Anthropic
messages, Gemini ``generateContent``, including tool calls and usage with cached tokens.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.http_server import serve

HANG_LIMIT = 20.0  # a hanging reply gives up after this long, so a broken test cannot stall


@dataclass(frozen=True)
class Recorded:
    """One request as the server received it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    at: float


@dataclass(frozen=True)
class Reply:
    """One answer: a status, a JSON body and headers; ``hang`` never answers (until teardown);
    ``events``: answer with these as server-sent ``data:`` lines (then ``[DONE]``, as OpenAI)
    instead; ``sse``: as server-sent events (``event:`` when named, ``data:``), nothing after
    (as Anthropic and Gemini); ``retry_after_in``: a ``Retry-After`` HTTP date this many seconds
    after the moment of answering (not of queueing, which on a busy machine can be seconds
    earlier)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False
    events: list[Any] | None = None
    sse: list[tuple[str | None, Any]] | None = None
    retry_after_in: float | None = None


class VendorServer:
    """Answers queued replies in order and records every request.

    Attributes:
        url: the base URL (``http://127.0.0.1:<port>``), set once serving.
        requests: what arrived, in order.
    """

    def __init__(self) -> None:
        self.url = ""
        self.requests: list[Recorded] = []
        self._replies: deque[Reply] = deque()
        self._released = asyncio.Event()
        self.app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["GET", "POST"])])

    def queue(self, *replies: Reply) -> None:
        """Answer the next requests with ``replies``, in order."""
        self._replies.extend(replies)

    def gaps(self) -> list[float]:
        """Seconds between consecutive requests, as the server saw them."""
        return [b.at - a.at for a, b in zip(self.requests, self.requests[1:], strict=False)]

    def release(self) -> None:
        """Let hanging replies finish (at teardown)."""
        self._released.set()

    def reset(self) -> None:
        """Forget requests and unanswered replies and end hanging ones: a clean server for the next test."""
        self._released.set()
        self._released = asyncio.Event()
        self._replies.clear()
        self.requests.clear()

    async def _handle(self, request: Request) -> Response:
        raw = await request.body()
        body: Any = None
        if raw:
            try:
                body = await request.json()
            except ValueError:
                body = raw.decode("utf-8", "replace")
        self.requests.append(
            Recorded(
                request.method,
                request.url.path,
                dict(request.query_params),
                {k.lower(): v for k, v in request.headers.items()},
                body,
                time.monotonic(),
            )
        )
        if not self._replies:
            return JSONResponse({"error": {"message": "no reply queued"}}, status_code=599)
        reply = self._replies.popleft()
        if reply.hang:
            with suppress(TimeoutError):
                await asyncio.wait_for(self._released.wait(), HANG_LIMIT)
            return JSONResponse({"error": {"message": "hung"}}, status_code=504)
        if reply.sse is not None:
            lines = "".join(
                (f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n"
                for name, data in reply.sse
            )
            return Response(lines, status_code=reply.status, media_type="text/event-stream")
        if reply.events is not None:
            lines = "".join(f"data: {json.dumps(event)}\n\n" for event in reply.events) + "data: [DONE]\n\n"
            return Response(lines, status_code=reply.status, media_type="text/event-stream")
        headers = dict(reply.headers)
        if reply.retry_after_in is not None:
            headers["Retry-After"] = http_date_in(reply.retry_after_in)
        return JSONResponse(reply.body, status_code=reply.status, headers=headers)


@asynccontextmanager
async def vendor_server() -> AsyncIterator[VendorServer]:
    """Serve a ``VendorServer`` until the block ends.

    Starting and stopping uvicorn costs ~0.2 s, so test modules share one server per module
    and ``reset`` it between tests.
    """
    server = VendorServer()
    async with serve(server.app) as url:
        server.url = url
        try:
            yield server
        finally:
            server.release()


def http_date_in(seconds: float) -> str:
    """An HTTP date at least ``seconds`` from now (for ``Retry-After``): rounded up, since the
    date has whole seconds and a rounded-down one could be a second sooner (on a busy machine
    the client, sent it a little later, then waited less than a test allows for)."""
    return formatdate(math.ceil(time.time() + seconds), usegmt=True)


# --- OpenAI chat completions -------------------------------------------------------------


def openai_completion(
    content: str | None = None,
    tool_calls: list[tuple[str, str, str]] | None = None,
    *,
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    cached_tokens: int = 0,
    model: str = "gpt-4o-mini-2024-07-18",
    finish_reason: str | None = None,
) -> dict[str, Any]:
    """A ``chat.completion`` object; ``tool_calls`` are (id, name, arguments JSON text)."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in tool_calls
        ]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }


def openai_chunks(
    texts: list[str],
    tool_calls: list[tuple[str, str, list[str]]] | None = None,
    *,
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    model: str = "gpt-4o-mini-2024-07-18",
    usage: bool = True,
) -> list[dict[str, Any]]:
    """A streamed ``chat.completion.chunk`` sequence: one chunk per text, then each tool call
    (id, name, its arguments JSON in pieces), the finish, and (with ``usage``, as OpenAI sends
    when asked) a last chunk with the usage."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-stream",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    found = [chunk({"role": "assistant", "content": ""})]
    found += [chunk({"content": text}) for text in texts]
    for index, (cid, name, pieces) in enumerate(tool_calls or ()):
        start = {"index": index, "id": cid, "type": "function", "function": {"name": name, "arguments": ""}}
        found.append(chunk({"tool_calls": [start]}))
        found += [chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}) for p in pieces]
    found.append(chunk({}, "tool_calls" if tool_calls else "stop"))
    counted = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
               "total_tokens": prompt_tokens + completion_tokens}  # fmt: skip
    if usage:
        found.append({**chunk({}), "choices": [], "usage": counted})
    return found


def openai_error(message: str, type_: str, code: str | None = None) -> dict[str, Any]:
    """An OpenAI error body."""
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def openai_embeddings(vectors: list[list[float]]) -> dict[str, Any]:
    """An embeddings list, deliberately out of order (the API does not promise order)."""
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return {
        "object": "list",
        "data": list(reversed(data)),
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 4, "total_tokens": 4},
    }


# --- Anthropic messages ------------------------------------------------------------------


def anthropic_message(
    blocks: list[dict[str, Any]],
    *,
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_read: int = 0,
    cache_creation: int = 0,
    model: str = "claude-sonnet-4-5-20250929",
    stop_reason: str | None = None,
) -> dict[str, Any]:
    """A ``message`` object; ``blocks`` from ``text_block`` / ``tool_use_block``."""
    uses_tools = any(b["type"] == "tool_use" for b in blocks)
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop_reason or ("tool_use" if uses_tools else "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_read_input_tokens": cache_read,
            "cache_creation_input_tokens": cache_creation,
        },
    }


def anthropic_events(
    texts: list[str],
    tool: tuple[str, str, list[str]] | None = None,
    *,
    input_tokens: int = 10,
    output_tokens: int = 5,
    model: str = "claude-sonnet-4-5-20250929",
) -> list[tuple[str | None, Any]]:
    """A streamed message: a text block fed in ``texts``, then (``tool``: id, name, its input
    JSON in pieces) a tool_use block, the stop reason and usage, as the Messages API streams."""
    start = anthropic_message([], input_tokens=input_tokens, output_tokens=1, model=model)
    found: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": start})]

    def block(index: int, content: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        found.append(
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": content})
        )
        for delta in deltas:
            found.append(
                ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            )
        found.append(("content_block_stop", {"type": "content_block_stop", "index": index}))

    block(0, {"type": "text", "text": ""}, [{"type": "text_delta", "text": t} for t in texts])
    if tool is not None:
        tool_id, name, pieces = tool
        block(1, {"type": "tool_use", "id": tool_id, "name": name, "input": {}},
              [{"type": "input_json_delta", "partial_json": p} for p in pieces])  # fmt: skip
    found.append(("ping", {"type": "ping"}))
    stop = "tool_use" if tool else "end_turn"
    found.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                    "usage": {"output_tokens": output_tokens}}))  # fmt: skip
    found.append(("message_stop", {"type": "message_stop"}))
    return found


def text_block(text: str) -> dict[str, Any]:
    """An Anthropic text block."""
    return {"type": "text", "text": text}


def tool_use_block(block_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic tool_use block."""
    return {"type": "tool_use", "id": block_id, "name": name, "input": arguments}


def anthropic_error(type_: str, message: str) -> dict[str, Any]:
    """An Anthropic error body."""
    return {"type": "error", "error": {"type": type_, "message": message}}


# --- Gemini generateContent --------------------------------------------------------------


def gemini_response(
    parts: list[dict[str, Any]],
    *,
    prompt_tokens: int = 10,
    output_tokens: int = 5,
    cached_tokens: int = 0,
    thoughts_tokens: int = 0,
    model: str = "gemini-2.0-flash-001",
    finish_reason: str = "STOP",
) -> dict[str, Any]:
    """A ``GenerateContentResponse``; ``parts`` from ``text_part`` / ``function_call_part``."""
    usage: dict[str, Any] = {
        "promptTokenCount": prompt_tokens,
        "candidatesTokenCount": output_tokens,
        "totalTokenCount": prompt_tokens + output_tokens + thoughts_tokens,
    }
    if cached_tokens:
        usage["cachedContentTokenCount"] = cached_tokens
    if thoughts_tokens:
        usage["thoughtsTokenCount"] = thoughts_tokens
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": finish_reason, "index": 0}
        ],
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": "resp-test",
    }


def gemini_chunks(
    texts: list[str], calls: list[dict[str, Any]] | None = None, **final: Any
) -> list[tuple[str | None, Any]]:
    """A streamed answer: one chunk per text, then the function calls with the finish reason
    and usage (``final``: as ``gemini_response`` takes them), as ``streamGenerateContent`` sends."""
    found: list[tuple[str | None, Any]] = []
    for text in texts:
        chunk = gemini_response([text_part(text)])
        chunk["candidates"][0].pop("finishReason")
        chunk.pop("usageMetadata")
        found.append((None, chunk))
    found.append((None, gemini_response(calls or [], **final)))
    return found


def text_part(text: str) -> dict[str, Any]:
    """A Gemini text part."""
    return {"text": text}


def function_call_part(
    name: str, arguments: dict[str, Any], *, call_id: str | None = None, signature: str | None = None
) -> dict[str, Any]:
    """A Gemini functionCall part (with a thought signature, base64, when given)."""
    call: dict[str, Any] = {"name": name, "args": arguments}
    if call_id:
        call["id"] = call_id
    part: dict[str, Any] = {"functionCall": call}
    if signature:
        part["thoughtSignature"] = signature
    return part


def gemini_error(code: int, status: str, message: str) -> dict[str, Any]:
    """A Google API error body."""
    return {"error": {"code": code, "message": message, "status": status}}


def gemini_embeddings(vectors: list[list[float]]) -> dict[str, Any]:
    """A ``batchEmbedContents`` answer."""
    return {"embeddings": [{"values": v} for v in vectors]}
