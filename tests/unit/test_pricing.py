"""Prices per model, the cost arithmetic, and the operator's override file."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentflow.core.chat import Usage
from agentflow.core.errors import ConfigError
from agentflow.core.pricing import DEFAULT_PRICES, Price, PriceTable, parse_overrides
from agentflow.llm.pricing_file import load_price_table

TABLE = PriceTable()


def test_the_built_in_table_covers_the_current_models() -> None:
    required = [
        "gpt-4o",
        "gpt-4o-mini",
        "gpt-4.1",
        "gpt-4.1-mini",
        "gpt-4.1-nano",
        "o3-mini",
        "claude-opus-4",
        "claude-sonnet-4",
        "claude-sonnet-4-5",
        "claude-3-5-haiku",
        "claude-haiku-4-5",
        "gemini-2.0-flash",
        "gemini-2.5-pro",
        "gemini-2.5-flash",
    ]
    assert [m for m in required if m not in DEFAULT_PRICES] == []
    assert DEFAULT_PRICES["scripted"] == Price(0.0, 0.0, 0.0)
    for name, price in DEFAULT_PRICES.items():
        assert 0 <= price.cached_input <= price.input, name


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("gpt-4o", "gpt-4o"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),  # the longest prefix wins
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-sonnet-4-20250514", "claude-sonnet-4"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("gemini-2.0-flash-001", "gemini-2.0-flash"),
        ("gemini-2.5-flash-lite", "gemini-2.5-flash-lite"),
        ("models/gemini-2.5-pro", "gemini-2.5-pro"),
        ("openai:gpt-4.1-mini", "gpt-4.1-mini"),
        ("GPT-4O", "gpt-4o"),
    ],
)
def test_models_find_their_family_price(model: str, family: str) -> None:
    assert TABLE.price_of(model) == DEFAULT_PRICES[family]
    assert TABLE.known(model)


def test_a_prefix_must_end_at_a_word_boundary() -> None:
    table = PriceTable({"gpt-4": Price(30, 60, 30), "o3": Price(2, 8, 0.5)})

    assert table.price_of("gpt-4-0613") == Price(30, 60, 30)
    assert table.price_of("gpt-4o") is None  # gpt-4's price must not bill gpt-4o
    assert table.price_of("o3x") is None


def test_cost_bills_cached_tokens_at_the_cached_price() -> None:
    usage = Usage(input_tokens=1_000_000, output_tokens=200_000, cached_input_tokens=400_000)

    # gpt-4o: 600k uncached at 2.50, 400k cached at 1.25, 200k output at 10.00 (USD per 1M)
    assert TABLE.cost("gpt-4o-2024-08-06", usage) == pytest.approx(1.5 + 0.5 + 2.0)
    assert TABLE.cost("scripted", usage) == 0.0 and TABLE.known("scripted")


def test_unknown_models_cost_nothing_and_say_so() -> None:
    assert TABLE.cost("llama3.1:8b", Usage(1000, 1000, 0)) == 0.0
    assert not TABLE.known("llama3.1:8b")
    assert TABLE.price_of("llama3.1:8b") is None


def test_cached_tokens_beyond_the_prompt_are_not_billed_twice() -> None:
    table = PriceTable({"m": Price(1.0, 0.0, 0.5)})
    assert table.cost("m", Usage(input_tokens=10, cached_input_tokens=50)) == pytest.approx(10 * 0.5 / 1e6)


def test_overrides_replace_and_extend_the_built_in_prices() -> None:
    overrides = parse_overrides(
        {"gpt-4o": {"input": 2.0, "output": 8, "cached_input": 1}, "llama3.1": {"input": 0.1, "output": 0.2}}
    )
    table = PriceTable(overrides=overrides)

    assert table.price_of("gpt-4o-2024-11-20") == Price(2.0, 8.0, 1.0)
    assert table.price_of("gpt-4o-mini") == DEFAULT_PRICES["gpt-4o-mini"]
    assert table.price_of("llama3.1:8b") == Price(0.1, 0.2, 0.1)  # cached_input defaults to input


def test_no_document_means_no_overrides() -> None:
    assert parse_overrides(None) == {}


@pytest.mark.parametrize(
    ("doc", "path", "fragment"),
    [
        (["gpt-4o"], "", "expected a mapping"),
        ({"gpt-4o": 2.5}, "gpt-4o", "expected {input, output, cached_input}"),
        ({"gpt-4o": {"input": 2.5}}, "gpt-4o.output", "required"),
        ({"gpt-4o": {"input": -1, "output": 1}}, "gpt-4o.input", "expected a number >= 0"),
        ({"gpt-4o": {"input": True, "output": 1}}, "gpt-4o.input", "expected a number >= 0"),
        ({"gpt-4o": {"input": "2.5", "output": 1}}, "gpt-4o.input", "expected a number >= 0"),
        ({"gpt-4o": {"input": float("inf"), "output": 1}}, "gpt-4o.input", "expected a number >= 0"),
        ({"gpt-4o": {"input": 1, "output": 1, "cache": 1}}, "gpt-4o.cache", "unknown field"),
        ({"": {"input": 1, "output": 1}}, "", "non-empty string"),
    ],
)
def test_bad_overrides_say_where_and_what(doc: object, path: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_overrides(doc)

    assert caught.value.code == "pricing_invalid"
    errors = caught.value.info.details["errors"]
    assert any(e["path"] == path and fragment in e["message"] for e in errors), errors
    assert caught.value.info.solution


def test_every_bad_entry_is_listed() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_overrides({"a": {"input": -1, "output": -1}, "b": {}})

    paths = sorted(e["path"] for e in caught.value.info.details["errors"])
    assert paths == ["a.input", "a.output", "b.input", "b.output"]
    assert "(and 3 more)" in caught.value.info.message


def test_the_pricing_file_may_be_yaml_or_json(tmp_path: Path) -> None:
    yaml_file = tmp_path / "prices.yaml"
    yaml_file.write_text("gpt-4o:\n  input: 2.0\n  output: 8.0\n  cached_input: 1.0\n")
    json_file = tmp_path / "prices.json"
    json_file.write_text('{"my-model": {"input": 1, "output": 2}}')

    assert load_price_table(yaml_file).price_of("gpt-4o") == Price(2.0, 8.0, 1.0)
    assert load_price_table(json_file).price_of("my-model") == Price(1.0, 2.0, 1.0)
    assert load_price_table(None).price_of("gpt-4o") == DEFAULT_PRICES["gpt-4o"]


def test_an_unreadable_or_invalid_pricing_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    broken = tmp_path / "broken.yaml"
    broken.write_text("gpt-4o: {input: [\n")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("gpt-4o: {input: cheap, output: 1}\n")

    for path, code in [
        (missing, "pricing_file_unreadable"),
        (broken, "pricing_file_unreadable"),
        (wrong, "pricing_invalid"),
    ]:
        with pytest.raises(ConfigError) as caught:
            load_price_table(path)
        assert caught.value.code == code, path
        assert str(path) in caught.value.info.message


def test_prices_looked_up_are_remembered_up_to_a_bound() -> None:
    table = PriceTable()
    assert table.price_of("openai:gpt-4o-2024-08-06") == table.price_of("gpt-4o")
    for index in range(1100):  # past the bound: still answered, no longer remembered
        assert table.price_of(f"unknown-model-{index}") is None
    assert len(table._found) == 1024
    assert table.price_of("claude-sonnet-4-5-20250929") == table.price_of("claude-sonnet-4-5")
