"""Templates cannot stall the process: every blow-up is refused with ``template_limit``,
quickly and before it takes its memory; ordinary templates keep working; a slow render on
the event loop gives way to a thread."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agentflow.core.errors import StepFailure
from agentflow.core.templating import RenderDeferred, deferring, render, template_problem
from agentflow.core.templating.meter import MAX_SIZE
from agentflow.nodes.rendering import call_rendering

CTX: dict[str, Any] = {"payload": {"n": 3, "text": "x" * 1000, "items": [{"a": 1}, {"a": 2}]}}

BLOWUPS = [
    "{{ (7**10000000) % 10 }}",
    "{{ ('ab' * 300000000) | length }}",
    "{{ 300000000 * 'ab' }}",
    "{{ [1] * 300000000 }}",
    "{{ [payload.text] * 10000 }}",
    "{{ 99999999999999999999 ** 99999 }}",
    "{% set ns = namespace(n=7) %}{% for i in range(100) %}{% set ns.n = ns.n * ns.n %}{% endfor %}{{ ns.n }}",
    "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ 1 }}",
    "{{ 'x' | center(1000000000) }}",
    "{{ ('a\\n' * 1000) | indent(10000) }}",
    "{{ 'x'.ljust(1000000000) }}",
    "{{ 'x'.zfill(1000000000) }}",
    "{{ ('\\t' * 1000).expandtabs(1000000) }}",
    "{{ payload.text.replace('x', payload.text * 10) }}",
    "{{ payload.text | replace('', payload.text * 3) }}",
    "{{ '%0*d' % (1000000000, 1) }}",
    "{{ '%01000000000d' % 1 }}",
    "{{ '%s' | format(payload.text * 2000) }}",
    "{{ '{:>1000000000}'.format(1) }}",
    "{{ '{:{w}}'.format(1, w=1000000000) }}",
    "{{ '{0}{0}{0}{0}{0}{0}{0}{0}{0}{0}'.format(payload.text * 1000) }}",
    "{{ range(100000) | map('center', 1000000) | list | length }}",
    "{{ range(100000) | join(payload.text) }}",
    "{{ ''.join(range(100000) | map('string') | map('center', 100)) }}",
    "{{ [1] | batch(1000000000, 'x') | list }}",
    "{{ range(10) | slice(1000000000, 'x') | list }}",
    "{{ ([[1]] * 1000) | sum(start=[]) }}",
    "{{ dict.fromkeys(range(100000), payload.text) }}",
    "{{ lipsum(100000) }}",
    "{{ ('x ' * 60000) | wordwrap(1) }}",
    "{{ ('x' * 200000) | urlize }}",
    "{{ range(10) | slice(3, payload.text * 1000) | list }}",
    "{{ payload.text | truncate(5, end=payload.text * 2000) }}",
    "{{ payload | tojson(indent=1000000) }}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{% for i in range(100000) %}" + "{{ payload.text }}" * 10 + "{% endfor %}",
]


@pytest.mark.parametrize("template", BLOWUPS)
def test_each_blowup_is_refused_with_template_limit_quickly(template: str) -> None:
    started = time.thread_time()
    with pytest.raises(StepFailure) as info:
        render({"v": template}, CTX, node="bomb", field="args")
    spent = time.thread_time() - started  # CPU, so a busy machine does not fail the test
    assert info.value.info.code == "template_limit", info.value.info
    assert not info.value.retryable
    assert spent < 0.5, f"{spent:.3f}s of CPU for {template!r}"
    assert "node 'bomb' field args.v" in info.value.info.message


FINE = [
    ("{{ payload.n * 2 }}", 6),
    ("{{ 2 ** 64 }}", 2**64),
    ("{{ 'ab' * 3 }}", "ababab"),
    ("{{ [0] * 3 }}", [0, 0, 0]),
    ("{{ payload.items | map(attribute='a') | sum }}", 3),
    ("{{ payload.items | map(attribute='a') }}", [1, 2]),
    ("{{ range(3) }}", [0, 1, 2]),
    ("{{ ', '.join(['a', 'b']) }}", "a, b"),
    ("{{ ['a', 'b'] | join('-') }}", "a-b"),
    ("{{ '%05.1f' % 3.14159 }}", "003.1"),
    ("{{ '{:>5}|{}'.format('a', payload.n) }}", "    a|3"),
    ("{{ 'Hi' | center(6) }}", "  Hi  "),
    ("{{ 'a-b'.replace('-', '+') }}", "a+b"),
    ("{{ {'k': payload.n, 'l': [1, 2]} }}", {"k": 3, "l": [1, 2]}),
    ("n={{ payload.n }}{% for i in range(3) %},{{ i }}{% endfor %}", "n=3,0,1,2"),
    ("{{ payload.text ~ '!' | length }}", "x" * 1000 + "1"),
    ("{{ ('x' * 1000000) | length }}", 1_000_000),
    ("{% set ns = namespace(t=0) %}{% for i in range(2000) %}{% set ns.t = ns.t + i %}{% endfor %}{{ ns.t }}",
     "1999000"),
]  # fmt: skip


@pytest.mark.parametrize(("template", "expected"), FINE)
def test_ordinary_templates_still_render(template: str, expected: Any) -> None:
    assert render(template, CTX) == expected


def test_the_largest_allowed_string_renders_and_one_more_is_refused() -> None:
    assert len(render(f"{{{{ 'x' * {MAX_SIZE - 2} }}}}", {})) == MAX_SIZE - 2
    with pytest.raises(StepFailure) as info:
        render(f"{{{{ 'x' * {MAX_SIZE + 1} }}}}", {})
    assert info.value.info.code == "template_limit"


@pytest.mark.parametrize(
    "template",
    ['{% include "x.txt" %}', '{% import "m" as m %}', '{% extends "base" %}', '{% from "m" import f %}'],
)
def test_templates_stand_alone(template: str) -> None:
    with pytest.raises(StepFailure) as info:
        render(template, CTX, node="n", field="output")
    assert info.value.info.code == "template_error"
    assert "not available" in info.value.info.message
    assert "/" not in info.value.info.message.replace(template, "")  # no server paths
    assert template_problem(template) is not None


@pytest.mark.parametrize(
    "template",
    ["{{ 1 / 0 }}", "{{ payload.n + 'a' }}", "{{ payload.__class__ }}", "{{ (((1) }}", "{{ 2.0 ** 100000 }}"],
)
def test_any_other_error_is_a_template_error_not_a_crash(template: str) -> None:
    with pytest.raises(StepFailure) as info:
        render(template, CTX, node="n", field="args")
    assert info.value.info.code == "template_error"
    assert info.value.info.message.startswith("node 'n' field args: ")


def test_template_problem_names_syntax_errors_and_accepts_good_templates() -> None:
    assert template_problem("{{ payload.x }} and {% for i in payload.items %}{{ i }}{% endfor %}") is None
    assert template_problem("{% for %}") is not None
    assert template_problem("x" * 200_000 + "{{ 1 }}") is not None  # too long to be a template


# Well past the 2 ms a render may take inline, well within its 0.25 s of CPU (also when a
# coverage tracer slows every line down several times).
SLOW = (
    "{% set ns = namespace(t=0) %}{% for i in range(3000) %}{% set ns.t = ns.t + i %}{% endfor %}{{ ns.t }}"
)


def test_a_slow_render_gives_way_inside_deferring_and_finishes_outside() -> None:
    with pytest.raises(RenderDeferred), deferring():
        render(SLOW, {})
    assert render(SLOW, {}) == str(sum(range(3000)))


async def test_call_rendering_finishes_a_slow_render_on_a_thread_while_the_loop_turns() -> None:
    ticks = 0
    longest_gap = 0.0

    async def ticker() -> None:
        nonlocal ticks, longest_gap
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            longest_gap, last, ticks = max(longest_gap, now - last), now, ticks + 1

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    try:
        results = await asyncio.gather(*(call_rendering(render, SLOW, {}) for _ in range(3)))
    finally:
        task.cancel()
    assert results == [str(sum(range(3000)))] * 3
    assert ticks > 3  # the loop kept turning while the renders ran elsewhere
    print(f"longest event-loop gap during three slow renders: {longest_gap * 1000:.1f} ms")


def test_publishing_refuses_templates_that_cannot_compile_naming_each_path() -> None:
    from agentflow.core.config_validation import validate_config
    from agentflow.core.errors import ConfigError

    config = {
        "name": "t",
        "kind": "structured",
        "trigger": {"topics": ["a"], "enrollment": {"key": "{{ event.data.id "}},
        "nodes": [
            {
                "id": "call",
                "type": "tool",
                "tool": "echo",
                "args": {"value": "{% include 'x' %}", "ok": "{{ 1 }}"},
            },
            {"id": "done", "type": "finish", "output": {"v": "{% for %}"}},
        ],
    }
    with pytest.raises(ConfigError) as info:
        validate_config(config)
    paths = [e["path"] for e in info.value.info.details["errors"]]
    assert paths == ["trigger.enrollment.key", "nodes[0].args.value", "nodes[1].output.v"]
    agent = {"name": "a", "kind": "agent", "prompt": "p", "http_tools": [
        {"name": "h", "description": "d", "method": "GET", "url": "https://x/{{ args.id"}]}  # fmt: skip
    with pytest.raises(ConfigError) as info:
        validate_config(agent)
    assert [e["path"] for e in info.value.info.details["errors"]] == ["http_tools[0].url"]
