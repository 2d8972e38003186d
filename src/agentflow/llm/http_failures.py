"""Turn what went wrong on the wire (an HTTP status, a timeout, a refused connection) into a ``ModelError``.

Each adapter catches its SDK's exceptions, pulls out the status, the vendor's message and the
response headers, and calls these, so the codes and the advice are the same for every vendor.
"""

from __future__ import annotations

from typing import Any

from agentflow.core.frozen import frozen
from agentflow.llm.base import ModelError

_MAX_VENDOR_MESSAGE = 500


@frozen
class Vendor:
    """What the advice in an error names.

    Attributes:
        provider: the adapter's name (``openai``).
        key_vars: the variables that hold the key (``AGENTFLOW_OPENAI_API_KEY or OPENAI_API_KEY``).
        base_url_var: the setting that points the adapter at another server.
    """

    provider: str
    key_vars: str
    base_url_var: str


def error_for_status(
    vendor: Vendor,
    status: int,
    vendor_message: str,
    *,
    retry_after: float | None = None,
    vendor_code: str | None = None,
    model: str | None = None,
) -> ModelError:
    """The ``ModelError`` for an HTTP error status from the vendor.

    Args:
        vendor: who answered.
        status: the HTTP status.
        vendor_message: the vendor's own explanation (shortened).
        retry_after: seconds the response asked us to wait.
        vendor_code: the vendor's error code or type, when it sent one.
        model: the model the request named.
    """
    said = _shorten(vendor_message)
    details: dict[str, Any] = {"provider": vendor.provider, "status": status}
    if vendor_code:
        details["vendor_code"] = vendor_code
    if said:
        details["vendor_message"] = said
    if model:
        details["model"] = model
    name = vendor.provider
    if status == 401:
        return ModelError(
            "model_auth_failed",
            f"{name} rejected the API key (401): {said}. Set a valid key in {vendor.key_vars}.",
            retryable=False,
            details=details,
        )
    if status == 403:
        return ModelError(
            "model_auth_failed",
            f"{name} refused this request (403): {said}. Check that the key in {vendor.key_vars} "
            "may use this model and project.",
            retryable=False,
            details=details,
        )
    if status == 429:
        if vendor_code == "insufficient_quota":
            # Waiting does not refill a spent quota: fail for good with the reason.
            return ModelError(
                "model_rate_limited",
                f"{name} says the account's quota is used up: {said}. Check the plan and billing.",
                retryable=False,
                details=details,
            )
        return ModelError(
            "model_rate_limited",
            f"{name} is rate limiting this key (429): {said}. Retry later, lower concurrency, "
            "or raise the account's limits.",
            retryable=True,
            details=details,
            retry_after=retry_after,
        )
    if status in (408, 409) or status >= 500:
        return ModelError(
            "model_unavailable",
            f"{name} is unavailable ({status}): {said}. It usually passes; retry later.",
            retryable=True,
            details=details,
            retry_after=retry_after,
        )
    if status == 404:
        return ModelError(
            "model_bad_request",
            f"{name} does not know this model or endpoint (404): {said}. Check the model name"
            f"{f' {model!r}' if model else ''} and {vendor.base_url_var}.",
            retryable=False,
            details=details,
        )
    return ModelError(
        "model_bad_request",
        f"{name} rejected the request ({status}): {said}.",
        retryable=False,
        details=details,
    )


def error_for_timeout(vendor: Vendor, timeout: float) -> ModelError:
    """The ``ModelError`` for a call that got no complete answer within ``timeout`` seconds."""
    return ModelError(
        "model_timeout",
        f"{vendor.provider} did not answer within {timeout:g} s. Retry, or raise AGENTFLOW_MODEL_TIMEOUT "
        "for long answers.",
        retryable=True,
        details={"provider": vendor.provider, "timeout": timeout},
    )


def error_for_connection(vendor: Vendor, base_url: str | None, cause: BaseException | None) -> ModelError:
    """The ``ModelError`` for a request that never got a (complete) HTTP answer: refused, reset, blocked.

    A refusal that says it will not pass on retry (the guarded HTTP client's blocked
    destination or oversized answer carry ``retryable = False``) makes the error final, with
    the refusal's own advice.

    Args:
        vendor: who we tried to reach.
        base_url: the server we tried (None: the vendor's own).
        cause: the underlying exception (the SDK's error's ``__cause__``, or the transport error).
    """
    why = _shorten(str(cause)) if cause is not None else ""
    where = base_url or f"the {vendor.provider} API"
    details: dict[str, Any] = {
        "provider": vendor.provider,
        "base_url": base_url,
        "cause": type(cause).__name__ if cause else None,
    }
    final = _final_refusal(cause)
    if final is not None:
        info = getattr(final, "info", None)
        code = getattr(info, "code", None)
        solution = getattr(info, "solution", None)
        if code:
            details["cause_code"] = code
        return ModelError(
            "model_unavailable",
            f"could not reach {where}: {_shorten(str(final))}.{f' {solution}' if solution else ''}",
            retryable=False,
            details=details,
        )
    return ModelError(
        "model_unavailable",
        f"could not reach {where}{f': {why}' if why else ''}. Check the network and {vendor.base_url_var}"
        " (a private address must be allowed in AGENTFLOW_HTTP_ALLOW).",
        retryable=True,
        details=details,
    )


def _final_refusal(error: BaseException | None) -> BaseException | None:
    """The first exception along the cause chain that declares itself not retryable."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if getattr(error, "retryable", None) is False:
            return error
        error = error.__cause__ or error.__context__
    return None


def error_for_missing_key(vendor: Vendor) -> ModelError:
    """The ``ModelError`` for an adapter built without any API key."""
    return ModelError(
        "model_auth_missing",
        f"no {vendor.provider} API key: set {vendor.key_vars}, or choose another model with AGENTFLOW_MODEL.",
        retryable=False,
        details={"provider": vendor.provider},
    )


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_VENDOR_MESSAGE else text[: _MAX_VENDOR_MESSAGE - 1] + "…"
