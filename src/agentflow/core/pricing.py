"""What model calls cost: list prices per model and the arithmetic that turns usage into USD.

Pure data and arithmetic (no I/O): ``agentflow.llm.pricing_file`` reads an operator's
override file and hands the parsed document to ``parse_overrides``. Prices are in USD per
million tokens, the unit every vendor publishes.

A model is looked up by its exact name first, then by the longest known name it starts with,
so dated snapshots (``gpt-4o-2024-08-06``, ``claude-sonnet-4-5-20250929``) and versioned
names (``gemini-2.0-flash-001``) find their family's price. The prefix must end at a word
boundary: ``gpt-4`` never prices ``gpt-4o``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from agentflow.core.chat import Usage
from agentflow.core.errors import ConfigError
from agentflow.core.frozen import frozen


@frozen
class Price:
    """USD per million tokens.

    Attributes:
        input: uncached prompt tokens.
        output: answer tokens (reasoning/thinking tokens included, as vendors bill them).
        cached_input: prompt tokens served from the vendor's prompt cache.
    """

    input: float
    output: float
    cached_input: float


# List prices (standard tier, short prompts) as the vendors published them in 2025. Operators
# correct or extend them with AGENTFLOW_PRICING_FILE instead of waiting for a release.
DEFAULT_PRICES: Mapping[str, Price] = {
    # OpenAI
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-5": Price(1.25, 10.00, 0.125),
    "gpt-5-mini": Price(0.25, 2.00, 0.025),
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "o1": Price(15.00, 60.00, 7.50),
    "o3": Price(2.00, 8.00, 0.50),
    "o3-mini": Price(1.10, 4.40, 0.55),
    "o4-mini": Price(1.10, 4.40, 0.275),
    "text-embedding-3-small": Price(0.02, 0.0, 0.02),
    "text-embedding-3-large": Price(0.13, 0.0, 0.13),
    # Anthropic (cached_input is the cache-read price)
    "claude-opus-4": Price(15.00, 75.00, 1.50),
    "claude-opus-4-1": Price(15.00, 75.00, 1.50),
    "claude-opus-4-5": Price(5.00, 25.00, 0.50),
    "claude-sonnet-4": Price(3.00, 15.00, 0.30),
    "claude-sonnet-4-5": Price(3.00, 15.00, 0.30),
    "claude-3-7-sonnet": Price(3.00, 15.00, 0.30),
    "claude-3-5-sonnet": Price(3.00, 15.00, 0.30),
    "claude-3-5-haiku": Price(0.80, 4.00, 0.08),
    "claude-haiku-4-5": Price(1.00, 5.00, 0.10),
    # Google Gemini (prompts up to 200k tokens)
    "gemini-2.0-flash": Price(0.10, 0.40, 0.025),
    "gemini-2.0-flash-lite": Price(0.075, 0.30, 0.01875),
    "gemini-2.5-pro": Price(1.25, 10.00, 0.125),
    "gemini-2.5-flash": Price(0.30, 2.50, 0.03),
    "gemini-2.5-flash-lite": Price(0.10, 0.40, 0.01),
    "gemini-3-pro-preview": Price(2.00, 12.00, 0.20),
    "gemini-embedding-001": Price(0.15, 0.0, 0.15),
    # The deterministic scripted provider
    "scripted": Price(0.0, 0.0, 0.0),
}

# Provider prefixes a caller may leave on a model reference (``openai:gpt-4o``) and the
# ``models/`` prefix Gemini uses in resource names.
_STRIPPED_PREFIXES = ("openai:", "anthropic:", "gemini:", "models/")


class PriceTable:
    """The prices in force: the built-in table with an operator's overrides on top.

    Args:
        prices: the base table (``DEFAULT_PRICES`` unless a test wants another).
        overrides: prices that replace or extend the base table (from ``parse_overrides``).
    """

    def __init__(
        self, prices: Mapping[str, Price] = DEFAULT_PRICES, overrides: Mapping[str, Price] | None = None
    ) -> None:
        merged = {name.lower(): price for name, price in prices.items()}
        merged.update({name.lower(): price for name, price in (overrides or {}).items()})
        self._prices = merged
        # Longest names first, so the first prefix that matches is the most specific one.
        self._by_length = sorted(merged, key=len, reverse=True)
        self._found: dict[str, Price | None] = {}  # by model as asked: every model call asks

    def price_of(self, model: str) -> Price | None:
        """The price of ``model``: exact name, else the longest known prefix; None if unknown."""
        if model in self._found:
            return self._found[model]
        price = self._look_up(model)
        if len(self._found) < 1024:  # model names come from configs: few
            self._found[model] = price
        return price

    def _look_up(self, model: str) -> Price | None:
        name = _normalise(model)
        exact = self._prices.get(name)
        if exact is not None:
            return exact
        for known in self._by_length:
            if name.startswith(known) and not name[len(known)].isalnum():
                return self._prices[known]
        return None

    def known(self, model: str) -> bool:
        """Whether ``model`` has a price (so a cost of 0.0 means free, not unknown)."""
        return self.price_of(model) is not None

    def cost(self, model: str, usage: Usage) -> float:
        """USD for ``usage`` on ``model``; 0.0 for an unknown model (check ``known``).

        Cached prompt tokens are billed at ``cached_input``, the rest of the prompt at ``input``.
        """
        price = self.price_of(model)
        if price is None:
            return 0.0
        cached = min(usage.cached_input_tokens, usage.input_tokens)
        uncached = usage.input_tokens - cached
        return (
            uncached * price.input + cached * price.cached_input + usage.output_tokens * price.output
        ) / 1e6


def _normalise(model: str) -> str:
    name = model.strip().lower()
    for prefix in _STRIPPED_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def parse_overrides(doc: Any, source: str = "the pricing file") -> dict[str, Price]:
    """Validate a price document ``{model: {input, output, cached_input?}}`` (USD per 1M tokens).

    ``cached_input`` defaults to ``input`` (no cache discount). An empty document (None) is no
    overrides.

    Args:
        doc: the parsed YAML or JSON document.
        source: where it came from, for the error message.

    Raises:
        ConfigError: ``pricing_invalid``; ``details['errors']`` lists each ``{"path", "message"}``.
    """
    if doc is None:
        return {}
    errors: list[dict[str, str]] = []
    prices: dict[str, Price] = {}
    if not isinstance(doc, Mapping):
        errors.append({"path": "", "message": f"expected a mapping of model names, got {_kind(doc)}"})
    else:
        for model, entry in doc.items():
            price = _parse_entry(model, entry, errors)
            if price is not None:
                prices[str(model)] = price
    if errors:
        first = errors[0]
        where = f" at {first['path']}" if first["path"] else ""
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(
            "pricing_invalid",
            f"{source} is invalid{where}: {first['message']}{more}",
            details={"errors": errors},
            solution=(
                "Write one entry per model, e.g. `gpt-4o: {input: 2.5, output: 10, cached_input: 1.25}` "
                "(USD per million tokens)."
            ),
        )
    return prices


def _parse_entry(model: Any, entry: Any, errors: list[dict[str, str]]) -> Price | None:
    if not isinstance(model, str) or not model.strip():
        errors.append({"path": str(model), "message": "a model name must be a non-empty string"})
        return None
    if not isinstance(entry, Mapping):
        errors.append(
            {"path": model, "message": f"expected {{input, output, cached_input}}, got {_kind(entry)}"}
        )
        return None
    before = len(errors)
    unknown = sorted(str(key) for key in entry if key not in ("input", "output", "cached_input"))
    for key in unknown:
        errors.append(
            {"path": f"{model}.{key}", "message": "unknown field (use input, output, cached_input)"}
        )
    values: dict[str, float] = {}
    for key in ("input", "output", "cached_input"):
        if key not in entry:
            if key != "cached_input":
                errors.append({"path": f"{model}.{key}", "message": "required (USD per million tokens)"})
            continue
        value = entry[key]
        # bool is an int subclass; `input: true` is a typo, not a price.
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            errors.append({"path": f"{model}.{key}", "message": f"expected a number >= 0, got {value!r}"})
            continue
        values[key] = float(value)
    if len(errors) > before:
        return None
    return Price(values["input"], values["output"], values.get("cached_input", values["input"]))


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
