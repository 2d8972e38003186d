from typing import Any

import pytest

from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ConfigError

FORMAT = {
    "name": {"type": "string", "description": "who"},
    "count": "number",
    "vip": {"type": "boolean", "required": False},
    "customer.email": "string",
    "renewal": "date",
    "seen_at": {"type": "datetime", "required": False},
}


def config(fmt: Any = FORMAT) -> StructuredConfig:
    c = validate_config(
        {"name": "p", "kind": "structured", "payload_format": fmt, "nodes": [{"id": "a", "type": "finish"}]}
    )
    assert isinstance(c, StructuredConfig)
    return c


def errors(payload: Any) -> dict[str, str]:
    from agentflow.core.payload_format import payload_errors

    fmt = config().payload_format
    assert fmt is not None
    return {e["path"]: e["message"] for e in payload_errors(fmt, payload)}


GOOD = {"name": "Ada", "count": 3, "customer": {"email": "a@b.c"}, "renewal": "2026-02-28"}


def test_canonical_and_legacy_shapes_normalise() -> None:
    fmt = config().payload_format
    assert fmt is not None
    assert (fmt["count"].type, fmt["count"].required) == ("number", True)
    assert (fmt["vip"].type, fmt["vip"].required) == ("boolean", False)


def test_a_good_payload_passes_including_dotted_and_flat_names() -> None:
    assert errors(GOOD) == {}
    flat = {**{k: v for k, v in GOOD.items() if k != "customer"}, "customer.email": "x@y.z"}
    assert errors(flat) == {}
    assert errors({**GOOD, "vip": True, "seen_at": "2026-01-31T09:30:00Z", "extra": [1]}) == {}


@pytest.mark.parametrize(
    ("change", "path", "fragment"),
    [
        ({"name": 5}, "payload.name", "must be a string"),
        ({"count": "3"}, "payload.count", "must be a number"),
        ({"count": True}, "payload.count", "must be a number"),
        ({"vip": "yes"}, "payload.vip", "true or false"),
        ({"renewal": "2026-02-30"}, "payload.renewal", "ISO 8601 date"),
        ({"renewal": "2026-02-28T10:00:00"}, "payload.renewal", "ISO 8601 date"),
        ({"seen_at": "yesterday"}, "payload.seen_at", "ISO 8601 datetime"),
        ({"customer": {}}, "payload.customer.email", "required"),
        ({"name": None}, "payload.name", "required"),
    ],
)
def test_each_problem_has_its_path(change: dict[str, Any], path: str, fragment: str) -> None:
    found = errors({**GOOD, **change})
    assert list(found) == [path] and fragment in found[path]


def test_not_an_object_and_bad_formats() -> None:
    assert errors([1, 2]) == {"payload": "the payload must be a JSON object"}
    for bad in ({"x": "uuid"}, {"x": {"type": "string", "bogus": 1}}, ["x"]):
        with pytest.raises(ConfigError) as info:
            config(bad)
        assert all(e["path"].startswith("payload_format") for e in info.value.info.details["errors"])
