from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest

from agentflow.core.errors import StepFailure
from agentflow.core.step_context import StepContext
from agentflow.core.templating import copied, has_templates, render
from agentflow.core.tools import ToolRegistry, tool

CTX = {"payload": {"n": 3, "name": "Ada", "items": [1, 2]}, "steps": {"a": {"v": 10}}}


def test_sole_expression_keeps_its_type() -> None:
    assert render("{{ payload.n }}", CTX) == 3
    assert render("{{ payload.items }}", CTX) == [1, 2]
    assert render("{{ steps.a.v * 2 }}", CTX) == 20


def test_text_templates_and_nesting() -> None:
    assert render({"greet": "hi {{ payload.name }}!", "list": ["{{ payload.n }}", "x"]}, CTX) == {
        "greet": "hi Ada!",
        "list": [3, "x"],
    }
    assert render(7, CTX) == 7 and render("plain", CTX) == "plain"


@pytest.mark.parametrize(
    "template", ["{{ payload.missing }}", "{{ nope }}", "{{ payload.__class__.__mro__ }}", "{% for %}"]
)
def test_bad_or_unsafe_templates_fail_the_step_without_retry(template: str) -> None:
    with pytest.raises(StepFailure) as info:
        render(template, CTX)
    assert info.value.info.code == "template_error"
    assert not info.value.retryable


def test_tool_registration_and_argument_validation() -> None:
    registry = ToolRegistry()

    @tool(registry=registry, timeout="5s", side_effecting=True)
    async def notify(ctx: StepContext, to: str, urgent: bool = False) -> dict[str, Any]:
        """Send a note."""
        return {"to": to}

    spec = registry.get("notify")
    assert spec.is_async and spec.wants_context and spec.side_effecting
    assert spec.timeout == timedelta(seconds=5)
    assert spec.description == "Send a note."
    assert spec.validate_args({"to": "a@b"}) == {"to": "a@b", "urgent": False}
    assert set(spec.args_model.model_json_schema()["properties"]) == {"to", "urgent"}
    for bad in ({}, {"to": "x", "extra": 1}, {"to": "x", "urgent": "maybe"}):
        with pytest.raises(StepFailure) as info:
            spec.validate_args(bad)
        assert info.value.info.code == "invalid_tool_args" and not info.value.retryable


def test_unknown_tool() -> None:
    with pytest.raises(StepFailure) as info:
        ToolRegistry().get("ghost")
    assert info.value.info.code == "unknown_tool"


def test_step_context_key_and_task_drafts() -> None:
    run_id = uuid4()
    ctx = StepContext(uuid4(), run_id, uuid4(), step_seq=4, attempt=2, fencing_token=9, payload={})
    assert ctx.idempotency_key == f"{run_id}:4"
    ctx.create_task("Call the customer", assignee="dana", priority="high")
    assert [(t.title, t.assignee) for t in ctx.tasks] == [("Call the customer", "dana")]


def test_values_without_templates_are_found_and_copied_not_shared() -> None:
    static = {"to": ["a@x.io", {"cc": 1}], "n": 2, "s": "plain { text }"}
    assert not has_templates(static) and not has_templates([]) and not has_templates(None)
    assert has_templates({"to": ["a", {"cc": "{{ payload.cc }}"}]})
    assert has_templates(["{% if true %}x{% endif %}"])
    copy = copied(static)
    assert copy == static
    copy["to"][1]["cc"] = 2
    assert static["to"][1]["cc"] == 1, "a copy: a runner that changes it leaves the config alone"


def test_compiled_templates_keep_the_environments_globals_as_a_plain_dict() -> None:
    from agentflow.core.templating.render import _compiled

    texts = ["n={{ range(3) | list | length }}", "{{ namespace(k=2).k + input }}"]
    assert [render(text, {"input": 1}) for text in texts] == ["n=3", 3]
    template, _ = _compiled(texts[0])
    _, expression = _compiled(texts[1])
    # Copied once at compile time: Jinja would merge its ChainMap into a dict at every render.
    assert template is not None and type(template.globals) is dict and "range" in template.globals
    assert type(expression._template.globals) is dict  # type: ignore[union-attr]
