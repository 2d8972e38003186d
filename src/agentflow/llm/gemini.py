"""Google Gemini through the official ``google-genai`` SDK (the Gemini API, not Vertex AI).

The SDK's retry does not honour ``Retry-After``, so it is left off (no ``retry_options``)
and ``call_with_retries`` retries the same way as for every other vendor.

Gemini 3 models sign their function calls (``thoughtSignature``) and refuse a conversation
that returns a call without its signature. The signature travels inside the ``ToolCall`` id
(``<id>#sig=<base64>``), which every layer already keeps and echoes, so a run resumed from
its checkpoint on another worker still sends it back.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import httpx
import httpx2
from google import genai
from google.genai import errors, types
from pydantic import SecretStr

from agentflow.core.chat import Message, ModelRequest, ModelResponse, ToolCall, Usage
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
from agentflow.llm.retrying import RetryingVendor, retry_after_seconds
from agentflow.llm.streaming import TextSink

VENDOR = Vendor("gemini", "AGENTFLOW_GEMINI_API_KEY or GEMINI_API_KEY", "AGENTFLOW_GEMINI_BASE_URL")
DEFAULT_EMBEDDING_MODEL = "gemini-embedding-001"
SIGNATURE_MARK = "#sig="

_TIMEOUTS = (httpx.TimeoutException, httpx2.TimeoutException)
_TRANSPORT_ERRORS = (httpx.TransportError, httpx2.TransportError)


class GeminiProvider(RetryingVendor):
    """Gemini through ``generateContent``.

    Args:
        api_key: the key; None falls back to ``GEMINI_API_KEY`` / ``GOOGLE_API_KEY``.
        base_url: another server that speaks the protocol.
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
        name: str = "gemini",
    ) -> None:
        options = types.HttpOptions(
            base_url=base_url,
            timeout=max(1, round(timeout * 1000)),  # milliseconds
            httpx_async_client=http_client,
        )
        try:
            self._client = genai.Client(vertexai=False, api_key=reveal_key(api_key), http_options=options)
        except ValueError:
            raise error_for_missing_key(VENDOR) from None
        self.name = name
        self._base_url = base_url
        self._timeout = timeout
        self._max_retries = max_retries

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` as one ``generateContent`` call (retrying transient failures).

        Raises:
            ModelError: every failure.
        """
        return await self._retrying(lambda: self._request_once(request), request.model)

    async def stream(self, request: ModelRequest, sink: TextSink) -> ModelResponse:
        """As ``request``, streaming the answer's text to ``sink`` as it comes
        (``streamGenerateContent``; an attempt that is retried starts the sink again).

        Raises:
            ModelError: every failure.
        """
        return await self._retrying(lambda: self._stream_once(request, sink), request.model)

    async def embed(self, texts: list[str], model: str | None = None) -> list[list[float]]:
        """One embedding vector per text (default model ``gemini-embedding-001``).

        Raises:
            ModelError: every failure.
        """
        chosen = model or DEFAULT_EMBEDDING_MODEL

        async def embed_once() -> list[list[float]]:
            result = await self._client.aio.models.embed_content(model=chosen, contents=list(texts))
            return [list(e.values or ()) for e in result.embeddings or ()]

        return await self._retrying(embed_once, chosen)

    async def aclose(self) -> None:
        """Close the SDK's own connections (a client passed in stays open: its owner closes it)."""
        await self._client.aio.aclose()

    async def _request_once(self, request: ModelRequest) -> ModelResponse:
        reply = await self._client.aio.models.generate_content(
            model=request.model, contents=_contents(request.messages), config=_config(request)
        )
        return self._response(request, reply)

    async def _stream_once(self, request: ModelRequest, sink: TextSink) -> ModelResponse:
        sink.restart()
        chunks = await self._client.aio.models.generate_content_stream(
            model=request.model, contents=_contents(request.messages), config=_config(request)
        )
        parts: list[types.Part] = []
        last: types.GenerateContentResponse | None = None
        async for chunk in chunks:
            last = chunk
            candidate = chunk.candidates[0] if chunk.candidates else None
            for part in (candidate.content.parts if candidate and candidate.content else None) or ():
                parts.append(part)
                if part.text and not part.thought:
                    sink.text(part.text)
        return self._response(request, _joined(parts, last))

    def _response(self, request: ModelRequest, reply: types.GenerateContentResponse) -> ModelResponse:
        if not reply.candidates:
            feedback = reply.prompt_feedback
            blocked = feedback.block_reason if feedback is not None else None
            reason = str(blocked.value) if blocked is not None else None
            raise ModelError(
                "model_bad_request" if reason else "model_bad_output",
                f"{self.name} returned no answer"
                + (f": the prompt was blocked ({reason})" if reason else ""),
                retryable=False,
                details={"provider": self.name, "block_reason": reason},
            )
        candidate = reply.candidates[0]
        texts: list[str] = []
        calls: list[ToolCall] = []
        for part in (candidate.content.parts if candidate.content else None) or ():
            if part.function_call is not None:
                calls.append(_tool_call(len(calls), part))
            elif part.text and not part.thought:
                texts.append(part.text)
        content = "".join(texts)
        finish = str(candidate.finish_reason.value) if candidate.finish_reason else None
        structured: Any = None
        if request.output_schema is not None and not calls:
            structured = parse_structured(content, self.name, finish, _usage(reply.usage_metadata))
        return ModelResponse(
            message=Message("assistant", content, tuple(calls)),
            usage=_usage(reply.usage_metadata),
            model=reply.model_version or request.model,
            provider=self.name,
            structured=structured,
            finish_reason=finish,
        )

    def _translate(self, exc: Exception, model: str) -> ModelError | None:
        if isinstance(exc, errors.APIError):
            headers = getattr(exc.response, "headers", None)
            retry_after = retry_after_seconds(headers) if headers is not None else None
            return error_for_status(
                VENDOR,
                int(exc.code or 500),
                str(exc.message or exc.details),
                retry_after=retry_after if retry_after is not None else retry_delay(exc.details),
                vendor_code=exc.status,
                model=model,
            )
        if isinstance(exc, _TIMEOUTS):
            return error_for_timeout(VENDOR, self._timeout)
        if isinstance(exc, _TRANSPORT_ERRORS):
            return error_for_connection(VENDOR, self._base_url, exc)
        if isinstance(exc, errors.UnknownApiResponseError):
            return ModelError(
                "model_bad_output",
                f"{self.name} answered with a response the SDK cannot read: {exc}",
                details={"provider": self.name},
            )
        return None


def retry_delay(body: Any) -> float | None:
    """The wait a Google API error asks for in its body (``google.rpc.RetryInfo``: ``"retryDelay": "37s"``).

    Gemini's 429s carry it there rather than in a ``Retry-After`` header.
    """
    error = body.get("error", body) if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else ():
        delay = detail.get("retryDelay") if isinstance(detail, dict) else None
        if isinstance(delay, str) and delay.endswith("s"):
            try:
                seconds = float(delay[:-1])
            except ValueError:
                continue
            if seconds >= 0:
                return seconds
    return None


def _tool_call(index: int, part: types.Part) -> ToolCall:
    call = part.function_call
    assert call is not None
    # Gemini often sends no call id; the conversation still needs one to pair the result.
    call_id = call.id or f"call_{index}"
    if part.thought_signature:
        call_id += SIGNATURE_MARK + base64.b64encode(part.thought_signature).decode("ascii")
    return ToolCall(call_id, call.name or "", parse_tool_arguments(call.args))


def _config(request: ModelRequest) -> types.GenerateContentConfig:
    """The request's instructions, tools, output format and sampling, as Gemini takes them."""
    system = "\n\n".join(m.content for m in request.messages if m.role == "system" and m.content)
    declarations = [
        types.FunctionDeclaration(name=t.name, description=t.description, parameters_json_schema=t.parameters)
        for t in request.tools
    ]
    return types.GenerateContentConfig(
        system_instruction=system or None,
        tools=[types.Tool(function_declarations=declarations)] if declarations else None,
        response_mime_type="application/json" if request.output_schema is not None else None,
        response_json_schema=request.output_schema,
        max_output_tokens=request.max_output_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        stop_sequences=list(request.stop) or None,
        # Our tools are declarations, not Python callables: the agent loop runs them.
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )


def _joined(
    parts: list[types.Part], last: types.GenerateContentResponse | None
) -> types.GenerateContentResponse:
    """A streamed answer as one response: every chunk's parts, the last chunk's finish reason,
    usage and model (Gemini reports them with the last chunk)."""
    if last is None:
        return types.GenerateContentResponse(candidates=[])
    final = last.candidates[0] if last.candidates else None
    if final is None and not parts:
        return last  # blocked before any answer: its prompt feedback says why
    candidate = types.Candidate(
        content=types.Content(role="model", parts=parts),
        finish_reason=final.finish_reason if final else None,
        index=0,
    )
    return types.GenerateContentResponse(
        candidates=[candidate],
        usage_metadata=last.usage_metadata,
        model_version=last.model_version,
        prompt_feedback=last.prompt_feedback,
    )


def _contents(messages: tuple[Message, ...]) -> list[types.Content]:
    """The conversation as Gemini contents: assistant turns are ``model``; tool results are user turns.

    Consecutive turns of one role are merged (all results of one model turn go back together).
    Call ids are not sent: Gemini pairs results with calls by name and order, and an id made
    up here or by another vendor means nothing to it.
    """
    names = {call.id: call.name for m in messages for call in m.tool_calls}
    contents: list[types.Content] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "model" if message.role == "assistant" else "user"
        parts = _parts(message, names)
        if not parts:
            continue
        if contents and contents[-1].role == role and contents[-1].parts is not None:
            contents[-1].parts.extend(parts)
        else:
            contents.append(types.Content(role=role, parts=parts))
    return contents


def _parts(message: Message, names: dict[str, str]) -> list[types.Part]:
    if message.role == "tool":
        name = message.name or names.get(message.tool_call_id or "", "")
        response = types.FunctionResponse(name=name, response={"output": message.content})
        return [types.Part(function_response=response)]
    parts = [types.Part(text=message.content)] if message.content else []
    for call in message.tool_calls:
        _, _, signature = call.id.partition(SIGNATURE_MARK)
        parts.append(
            types.Part(
                function_call=types.FunctionCall(name=call.name, args=call.arguments),
                thought_signature=_signature_bytes(signature),
            )
        )
    return parts


def _signature_bytes(text: str) -> bytes | None:
    if not text:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None  # not ours (an id that happens to contain the mark): send no signature


def _usage(meta: types.GenerateContentResponseUsageMetadata | None) -> Usage:
    if meta is None:
        return Usage()
    # Thinking tokens are billed as output; tool-use prompt tokens are part of the prompt.
    prompt = (meta.prompt_token_count or 0) + (meta.tool_use_prompt_token_count or 0)
    output = (meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0)
    return Usage(prompt, output, meta.cached_content_token_count or 0)
