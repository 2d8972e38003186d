"""Anthropic's Messages API (Claude) through the official ``anthropic`` SDK.

Built with the SDK's own retries off: ``call_with_retries`` retries the same way for every
vendor.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
from anthropic.types import (
    AssistantMessageParam,
    ContentBlockParam,
    MessageParam,
    TextBlockParam,
    ToolParam,
    UserMessageParam,
)
from anthropic.types import (
    Message as AnthropicMessage,
)
from anthropic.types.output_config_param import OutputConfigParam
from pydantic import SecretStr

from agentflow.core.chat import Message, ModelRequest, ModelResponse, ToolCall, ToolSchema, Usage
from agentflow.llm.base import ModelError
from agentflow.llm.credentials import reveal_key
from agentflow.llm.decoding import parse_structured, parse_tool_arguments
from agentflow.llm.http_failures import (
    Vendor,
    error_for_connection,
    error_for_missing_key,
    error_for_status,
    error_for_timeout,
)
from agentflow.llm.httpx_bridge import bridged_client
from agentflow.llm.retrying import RetryingVendor, retry_after_seconds
from agentflow.llm.streaming import TextSink

VENDOR = Vendor(
    "anthropic", "AGENTFLOW_ANTHROPIC_API_KEY or ANTHROPIC_API_KEY", "AGENTFLOW_ANTHROPIC_BASE_URL"
)

# The Messages API requires max_tokens; used when the request leaves it open.
DEFAULT_MAX_TOKENS = 4096


class AnthropicProvider(RetryingVendor):
    """Claude through the Messages API.

    Args:
        api_key: the key; None falls back to ``ANTHROPIC_API_KEY`` (or the SDK's other credentials).
        base_url: another server that speaks the protocol.
        timeout: seconds one attempt may take.
        max_retries: retries on 429, 5xx (529 overloaded included), connection errors and timeouts.
        http_client: the client to send through (the engine's guarded one); not closed here.
        name: the provider name reported on responses.

    Raises:
        ModelError: ``model_auth_missing`` when there are no credentials anywhere.
    """

    def __init__(
        self,
        api_key: SecretStr | str | None = None,
        *,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        http_client: httpx.AsyncClient | None = None,
        name: str = "anthropic",
    ) -> None:
        self._client = anthropic.AsyncAnthropic(
            api_key=reveal_key(api_key),
            base_url=base_url,
            timeout=timeout,
            max_retries=0,
            http_client=bridged_client(http_client) if http_client is not None else None,
        )
        client = self._client
        if client.api_key is None and client.auth_token is None and client.credentials is None:
            raise error_for_missing_key(VENDOR)
        self.name = name
        self._base_url = base_url
        self._timeout = timeout
        self._max_retries = max_retries

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` as one Messages call (retrying transient failures).

        Raises:
            ModelError: every failure.
        """
        return await self._retrying(lambda: self._request_once(request), request.model)

    async def stream(self, request: ModelRequest, sink: TextSink) -> ModelResponse:
        """As ``request``, streaming the answer's text to ``sink`` as it comes (an attempt
        that is retried starts the sink again).

        Raises:
            ModelError: every failure.
        """
        return await self._retrying(lambda: self._stream_once(request, sink), request.model)

    async def aclose(self) -> None:
        """Close the SDK's connections (a client passed in stays open: its owner closes it)."""
        await self._client.close()

    async def _request_once(self, request: ModelRequest) -> ModelResponse:
        reply = await self._client.messages.create(**self._arguments(request))
        return self._response(request, reply)

    async def _stream_once(self, request: ModelRequest, sink: TextSink) -> ModelResponse:
        sink.restart()
        # The SDK assembles the message from the events; its text deltas go to the sink.
        async with self._client.messages.stream(**self._arguments(request)) as events:
            async for text in events.text_stream:
                sink.text(text)
            reply = await events.get_final_message()
        return self._response(request, reply)

    def _arguments(self, request: ModelRequest) -> dict[str, Any]:
        system = "\n\n".join(m.content for m in request.messages if m.role == "system" and m.content)
        return {
            "model": request.model,
            "max_tokens": request.max_output_tokens or DEFAULT_MAX_TOKENS,
            "messages": _message_params(request.messages),
            "system": system or anthropic.omit,
            "tools": [_tool_param(t) for t in request.tools] if request.tools else anthropic.omit,
            "output_config": _output_config(request.output_schema)
            if request.output_schema
            else anthropic.omit,
            "extra_body": _sampling(request) or None,
            "stop_sequences": list(request.stop) if request.stop else anthropic.omit,
        }

    def _response(self, request: ModelRequest, reply: AnthropicMessage) -> ModelResponse:
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in reply.content:
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use":
                arguments = parse_tool_arguments(block.input if isinstance(block.input, dict) else None)
                calls.append(ToolCall(block.id, block.name, arguments))
        content = "".join(texts)
        structured: Any = None
        if request.output_schema is not None and not calls:
            if reply.stop_reason == "refusal":
                raise ModelError(
                    "model_bad_output",
                    f"{self.name} refused to answer: {content}",
                    retryable=False,
                    details={"provider": self.name},
                )
            structured = parse_structured(content, self.name, reply.stop_reason, _usage(reply))
        return ModelResponse(
            message=Message("assistant", content, tuple(calls)),
            usage=_usage(reply),
            model=reply.model or request.model,
            provider=self.name,
            structured=structured,
            finish_reason=reply.stop_reason,
        )

    def _translate(self, exc: Exception, model: str) -> ModelError | None:
        if isinstance(exc, anthropic.APITimeoutError):
            return error_for_timeout(VENDOR, self._timeout)
        if isinstance(exc, anthropic.APIConnectionError):
            return error_for_connection(VENDOR, self._base_url, exc.__cause__)
        if isinstance(exc, anthropic.APIStatusError):
            return error_for_status(
                VENDOR,
                exc.status_code,
                exc.api_message or exc.message,
                retry_after=retry_after_seconds(exc.response.headers),
                vendor_code=exc.type,
                model=model,
            )
        if isinstance(exc, anthropic.APIResponseValidationError):
            return ModelError(
                "model_bad_output",
                f"{self.name} answered with a response the SDK cannot read: {exc.message}",
                details={"provider": self.name},
            )
        if isinstance(exc, anthropic.AnthropicError):
            return ModelError(
                "model_unavailable", f"{self.name} call failed: {exc}", details={"provider": self.name}
            )
        return None


def _message_params(messages: tuple[Message, ...]) -> list[MessageParam]:
    """The conversation in Messages form: system text goes in ``system``; tool results are user turns.

    Consecutive turns of one role are merged, because the API wants user and assistant to
    alternate and all results of one assistant turn in the next user turn.
    """
    params: list[MessageParam] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _content_blocks(message)
        if not blocks:
            continue
        previous = params[-1]["content"] if params and params[-1]["role"] == role else None
        if isinstance(previous, list):
            previous.extend(blocks)
        elif role == "assistant":
            params.append(AssistantMessageParam(role="assistant", content=blocks))
        else:
            params.append(UserMessageParam(role="user", content=blocks))
    return params


def _content_blocks(message: Message) -> list[ContentBlockParam]:
    if message.role == "tool":
        call_id = message.tool_call_id or ""
        return [{"type": "tool_result", "tool_use_id": call_id, "content": message.content}]
    # The API refuses empty text blocks (an assistant turn that only calls tools has no text).
    blocks: list[ContentBlockParam] = []
    if message.content:
        text: TextBlockParam = {"type": "text", "text": message.content}
        blocks.append(text)
    for call in message.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments})
    return blocks


def _tool_param(tool: ToolSchema) -> ToolParam:
    schema: Any = tool.parameters
    return {"name": tool.name, "description": tool.description, "input_schema": schema}


def _output_config(schema: dict[str, Any]) -> OutputConfigParam:
    # The SDK's own transform: objects closed, unsupported keywords moved into descriptions.
    # The caller still validates the answer against the original schema.
    try:
        accepted = anthropic.transform_schema(schema)
    except (ValueError, TypeError, AttributeError) as exc:
        raise ModelError(
            "model_bad_request",
            f"the output schema cannot be sent to anthropic: {exc}",
            retryable=False,
            details={"provider": "anthropic"},
        ) from None
    return {"format": {"type": "json_schema", "schema": accepted}}


def _sampling(request: ModelRequest) -> dict[str, float]:
    # The SDK no longer lists temperature and top_p (newer Claude models fix them); older
    # models still take them, so they are sent only when the request sets them.
    found = {"temperature": request.temperature, "top_p": request.top_p}
    return {name: value for name, value in found.items() if value is not None}


def _usage(reply: AnthropicMessage) -> Usage:
    usage = reply.usage
    cache_read = usage.cache_read_input_tokens or 0
    cache_written = usage.cache_creation_input_tokens or 0
    # Anthropic's input_tokens leaves out both cache parts; ours counts the whole prompt.
    return Usage(usage.input_tokens + cache_read + cache_written, usage.output_tokens, cache_read)
