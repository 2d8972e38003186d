"""OpenAI, and any server that speaks its chat-completions protocol (Ollama, vLLM, LM Studio).

Built on the official ``openai`` SDK with its own retries off: ``call_with_retries`` retries
the same way for every vendor.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from typing import Any, cast

import httpx
import openai
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionMessageToolCallUnionParam,
    ChatCompletionToolUnionParam,
)
from openai.types.chat.completion_create_params import ResponseFormat
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
from agentflow.llm.openai_stream import StreamedAnswer
from agentflow.llm.retrying import RetryingVendor, retry_after_seconds
from agentflow.llm.streaming import TextSink
from agentflow.llm.usage_estimate import estimate_usage

logger = logging.getLogger(__name__)

VENDOR = Vendor("openai", "AGENTFLOW_OPENAI_API_KEY or OPENAI_API_KEY", "AGENTFLOW_OPENAI_BASE_URL")
DEFAULT_EMBEDDING_MODEL = "text-embedding-3-small"

# Local OpenAI-compatible servers (Ollama, LM Studio) take no key, but the SDK insists on one.
_NO_KEY_NEEDED = "not-needed"


class OpenAIProvider(RetryingVendor):
    """Chat completions through the ``openai`` SDK.

    Args:
        api_key: the key; None falls back to ``OPENAI_API_KEY``. With a ``base_url`` and no key
            at all, a placeholder is sent (local servers ignore it; a hosted one answers 401).
        base_url: another server that speaks the protocol (``http://localhost:11434/v1``).
        timeout: seconds one attempt may take.
        max_retries: retries on 429, 5xx, connection errors and timeouts.
        http_client: the client to send through (the engine's guarded one); not closed here.
        name: the provider name reported on responses.

    Raises:
        ModelError: ``model_auth_missing`` when there is no key anywhere.
    """

    def __init__(
        self,
        api_key: SecretStr | str | None = None,
        *,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        http_client: httpx.AsyncClient | None = None,
        name: str = "openai",
    ) -> None:
        # OpenAI itself wants max_completion_tokens (o-series reject max_tokens); compatible
        # servers know max_tokens and may ignore the newer name.
        self._compatible_server = base_url is not None and "api.openai.com" not in base_url
        key = reveal_key(api_key)
        if key is None and self._compatible_server:
            key = reveal_key(os.environ.get("OPENAI_API_KEY")) or _NO_KEY_NEEDED
        try:
            self._client = openai.AsyncOpenAI(
                api_key=key,
                base_url=base_url,
                timeout=timeout,
                max_retries=0,
                http_client=bridged_client(http_client) if http_client is not None else None,
            )
        except openai.OpenAIError:
            raise error_for_missing_key(VENDOR) from None
        self.name = name
        self._base_url = base_url
        # Learned from a compatible server that refused response_format json_schema (llama.cpp's
        # Python server knows only text and json_object, with an optional schema): JSON mode.
        self._json_mode = False
        self._timeout = timeout
        self._max_retries = max_retries

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` as one chat completion (retrying transient failures).

        Raises:
            ModelError: every failure.
        """
        return await self._retrying(lambda: self._request_once(request), request.model)

    async def embed(self, texts: list[str], model: str | None = None) -> list[list[float]]:
        """One embedding vector per text (default model ``text-embedding-3-small``).

        Raises:
            ModelError: every failure.
        """
        chosen = model or DEFAULT_EMBEDDING_MODEL

        async def embed_once() -> list[list[float]]:
            result = await self._client.embeddings.create(model=chosen, input=texts)
            ordered = sorted(result.data, key=lambda item: item.index)
            return [list(item.embedding) for item in ordered]

        return await self._retrying(embed_once, chosen)

    async def aclose(self) -> None:
        """Close the SDK's connections (a client passed in stays open: its owner closes it)."""
        await self._client.close()

    async def _request_once(self, request: ModelRequest) -> ModelResponse:
        try:
            completion = await self._client.chat.completions.create(**self._arguments(request))
        except openai.APIStatusError as exc:
            if not self._refuses_json_schema(exc, request):
                raise
            completion = await self._client.chat.completions.create(**self._arguments(request))
        return self._response(request, completion)

    def _refuses_json_schema(self, exc: openai.APIStatusError, request: ModelRequest) -> bool:
        """Whether a compatible server refused the ``json_schema`` response format; if so, this
        provider asks it for JSON mode with the schema from now on."""
        refused = (
            self._compatible_server
            and not self._json_mode
            and request.output_schema is not None
            and exc.status_code in (400, 422, 500)
            and "json_schema" in str(exc)
        )
        if refused:
            logger.warning(
                "%s refused response_format json_schema; asking it for json_object with the schema", self.name
            )
            self._json_mode = True
        return refused

    async def stream(self, request: ModelRequest, sink: TextSink) -> ModelResponse:
        """As ``request``, streaming the answer's text to ``sink`` as it comes (an attempt
        that is retried starts the sink again).

        Raises:
            ModelError: every failure.
        """
        return await self._retrying(lambda: self._stream_once(request, sink), request.model)

    async def _stream_once(self, request: ModelRequest, sink: TextSink) -> ModelResponse:
        sink.restart()
        try:
            chunks = await self._client.chat.completions.create(
                **self._arguments(request), stream=True, stream_options={"include_usage": True}
            )
        except openai.APIStatusError as exc:
            if not self._refuses_json_schema(exc, request):
                raise
            chunks = await self._client.chat.completions.create(
                **self._arguments(request), stream=True, stream_options={"include_usage": True}
            )
        answer = StreamedAnswer(request.model)
        async for chunk in chunks:
            answer.add(chunk, sink)
        response = self._response(request, answer.completion())
        if answer.usage is None:  # a server that reports no usage in streams: count what was spent
            response = replace(response, usage=estimate_usage(request, response.message))
        return response

    def _arguments(self, request: ModelRequest) -> dict[str, Any]:
        limit = request.max_output_tokens
        omit = openai.omit
        schema = request.output_schema
        compatible = self._compatible_server
        return {
            "model": request.model,
            "messages": [_message_param(m) for m in request.messages],
            "tools": [_tool_param(t) for t in request.tools] if request.tools else omit,
            "response_format": _response_format(schema, self._json_mode) if schema else omit,
            "max_completion_tokens": limit if limit is not None and not compatible else omit,
            "max_tokens": limit if limit is not None and compatible else omit,
            "temperature": request.temperature if request.temperature is not None else omit,
            "top_p": request.top_p if request.top_p is not None else omit,
            "stop": list(request.stop) if request.stop else omit,
        }

    def _response(self, request: ModelRequest, completion: ChatCompletion) -> ModelResponse:
        if not completion.choices:
            raise ModelError(
                "model_bad_output", f"{self.name} returned no choices", details={"provider": self.name}
            )
        choice = completion.choices[0]
        reply = choice.message
        calls = tuple(
            _tool_call(i, call) for i, call in enumerate(reply.tool_calls or ()) if call.type == "function"
        )
        content = reply.content or ""
        structured: Any = None
        if request.output_schema is not None and not calls:
            if reply.refusal:
                raise ModelError(
                    "model_bad_output",
                    f"{self.name} refused to answer: {reply.refusal}",
                    retryable=False,
                    details={"provider": self.name, "refusal": reply.refusal},
                )
            structured = parse_structured(content, self.name, choice.finish_reason, _usage(completion))
        return ModelResponse(
            message=Message("assistant", content, calls),
            usage=_usage(completion),
            model=completion.model or request.model,
            provider=self.name,
            structured=structured,
            finish_reason=choice.finish_reason,
        )

    def _translate(self, exc: Exception, model: str) -> ModelError | None:
        if isinstance(exc, openai.APITimeoutError):
            return error_for_timeout(VENDOR, self._timeout)
        if isinstance(exc, openai.APIConnectionError):
            return error_for_connection(VENDOR, self._base_url, exc.__cause__)
        if isinstance(exc, openai.APIStatusError):
            body = exc.body
            said = str(body.get("message") or exc.message) if isinstance(body, dict) else exc.message
            return error_for_status(
                VENDOR,
                exc.status_code,
                said,
                retry_after=retry_after_seconds(exc.response.headers),
                vendor_code=exc.code or exc.type,
                model=model,
            )
        if isinstance(exc, openai.APIResponseValidationError):
            return ModelError(
                "model_bad_output",
                f"{self.name} answered with a response the SDK cannot read: {exc.message}",
                details={"provider": self.name},
            )
        if isinstance(exc, openai.OpenAIError):
            return ModelError(
                "model_unavailable", f"{self.name} call failed: {exc}", details={"provider": self.name}
            )
        return None


def _message_param(message: Message) -> ChatCompletionMessageParam:
    if message.role == "system":
        return {"role": "system", "content": message.content}
    if message.role == "user":
        return {"role": "user", "content": message.content}
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content}
    calls: list[ChatCompletionMessageToolCallUnionParam] = [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        }
        for call in message.tool_calls
    ]
    if calls:
        # An assistant turn that only calls tools has no text: send null, not "".
        return {"role": "assistant", "content": message.content or None, "tool_calls": calls}
    return {"role": "assistant", "content": message.content}


def _tool_call(index: int, call: ChatCompletionMessageFunctionToolCall) -> ToolCall:
    # Some compatible servers send no call id; the conversation still needs one to pair results.
    arguments = parse_tool_arguments(call.function.arguments)
    return ToolCall(call.id or f"call_{index}", call.function.name, arguments)


def _tool_param(tool: ToolSchema) -> ChatCompletionToolUnionParam:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def _response_format(schema: dict[str, Any], json_mode: bool = False) -> ResponseFormat:
    # Not "strict": strict mode refuses schemas with optional fields or open objects, and the
    # caller validates the parsed answer against the schema anyway.
    if json_mode:  # llama.cpp's dialect: JSON mode constrained by a schema (not in OpenAI's types)
        return cast(ResponseFormat, {"type": "json_object", "schema": schema})
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": False}}


def _usage(completion: ChatCompletion) -> Usage:
    usage = completion.usage
    if usage is None:
        return Usage()
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    return Usage(usage.prompt_tokens, usage.completion_tokens, cached)
