"""Read the operator's price overrides (``AGENTFLOW_PRICING_FILE``, YAML or JSON)."""

from __future__ import annotations

from pathlib import Path

import yaml

from agentflow.core.errors import ConfigError
from agentflow.core.pricing import PriceTable, parse_overrides


def load_price_table(path: Path | None) -> PriceTable:
    """The built-in prices with the file's overrides on top (just the built-in ones for None).

    The file maps model names to ``{input, output, cached_input}`` in USD per million tokens.
    YAML is a superset of JSON, so one parser reads both.

    Raises:
        ConfigError: ``pricing_file_unreadable`` when the file cannot be read or parsed;
            ``pricing_invalid`` when an entry is wrong.
    """
    if path is None:
        return PriceTable()
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(
            "pricing_file_unreadable",
            f"cannot read the pricing file {path}: {exc}",
            details={"path": str(path)},
            solution="Fix AGENTFLOW_PRICING_FILE: a readable YAML or JSON file of model: {input, output}.",
        ) from None
    return PriceTable(overrides=parse_overrides(doc, source=f"the pricing file {path}"))
