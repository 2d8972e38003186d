"""The ``llm`` node: one prompt to a model, its answer (validated against ``output_schema``) as
the step's output (spec in ``agentflow.core.graph.model_nodes``).

A model call has no side effect but its cost, so the whole exchange (the answer, and the
re-asks when it breaks the schema) is one step: cut off, it is asked again from the start.
What each call spent is recorded on the step and the run even when the step fails.
"""

from __future__ import annotations

import json
from typing import Any

from agentflow.core import json_schemas
from agentflow.core.chat import Message, ModelRequest, ModelResponse, Spend
from agentflow.core.errors import StepFailure
from agentflow.core.graph.model_nodes import LlmNode
from agentflow.core.node_specs import NodeSpec
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.llm import streaming
from agentflow.llm.base import ModelError, ModelProvider
from agentflow.llm.decoding import StructuredOutputError
from agentflow.llm.streaming import TextSink
from agentflow.nodes.base import BaseRunner, NodeEnv
from agentflow.nodes.model_access import ModelAccess

DEFAULT_MAX_TOKENS = 2048
MAX_PROBLEMS = 10


class LlmRunner(BaseRunner):
    """Render the prompt, ask the model, check the answer, record the spend."""

    kind = "llm"

    def describe(self, node: NodeSpec) -> str | None:
        """The model asked (``default`` when the node names none)."""
        assert isinstance(node, LlmNode)
        return node.model or "default"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """The answer's ``text`` (and ``data`` with an output schema) is the output."""
        assert isinstance(node, LlmNode)
        access = _access(env, node)
        messages = await _messages(node, env)
        provider, model = access.resolve(node.model)
        label = model if model == provider.name else f"{provider.name}:{model}"
        request = ModelRequest(
            model,
            messages,
            output_schema=node.output_schema,
            max_output_tokens=node.max_tokens or DEFAULT_MAX_TOKENS,
            temperature=node.temperature,
            top_p=node.top_p,
            stop=tuple(node.stop),
        )
        step_input = {
            "model": label,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
        }
        for asked in range(node.output_retries + 1):
            # The first call checks the spend the previous checkpoint returned, when it did.
            breach = await access.over_budget(ctx.workspace_id, env.spend if asked == 0 else None)
            if breach is not None:
                raise StepFailure(
                    breach.code, breach.message, retryable=False, details=dict(breach.details),
                    solution="Raise the workspace's daily budget (agentflow budget set), "
                    "or wait for tomorrow (UTC), then retry the run.",
                )  # fmt: skip
            sink = None
            if node.stream and access.sinks is not None:
                sink = access.sinks(ctx.workspace_id, ctx.run_id, ctx.step_seq, ctx.attempt)
            try:
                answer, said, problems = await _ask(provider, request, node, env, access, label, sink)
            finally:
                if sink is not None:
                    await sink.close()
            if answer is not None and not problems:
                return step_input, NodeResult(output=_output(answer, node, env, label))
            if asked == node.output_retries:
                raise StepFailure(
                    "output_invalid",
                    f"llm node {node.id!r}: the model's answer broke output_schema "
                    f"{asked + 1} time(s): {'; '.join(problems[:3])}",
                    retryable=False,
                    details={"node": node.id, "problems": problems, "attempts": asked + 1,
                             "output": said[:2000]},
                    solution="Make the prompt say what to answer, loosen output_schema, "
                    "raise output_retries, or use a model with structured output.",
                )  # fmt: skip
            request = _reask(request, said, problems)
        raise AssertionError("unreachable")  # pragma: no cover


def _access(env: NodeEnv, node: LlmNode) -> ModelAccess:
    if env.models is None:
        raise StepFailure(
            "models_unavailable",
            f"llm node {node.id!r}: this worker was started without models",
            retryable=False,
            solution="Run the workflow on an agentflow worker (agentflow worker).",
        )
    return env.models


async def _messages(node: LlmNode, env: NodeEnv) -> tuple[Message, ...]:
    if node.messages is not None:
        rendered = await env.render([m.content for m in node.messages], node.id, "messages")
        return tuple(Message(m.role, _text(r)) for m, r in zip(node.messages, rendered, strict=True))
    found: list[Message] = []
    if node.system is not None:
        found.append(Message("system", _text(await env.render(node.system, node.id, "system"))))
    found.append(Message("user", _text(await env.render(node.prompt, node.id, "prompt"))))
    return tuple(found)


def _text(value: Any) -> str:
    """A rendered template as the message's text (a template that is one whole value, such as
    ``{{ input }}``, renders to that value: the model reads it as JSON)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


async def _ask(
    provider: ModelProvider, request: ModelRequest, node: LlmNode, env: NodeEnv, access: ModelAccess,
    label: str, sink: TextSink | None = None,
) -> tuple[ModelResponse | None, str, list[str]]:  # fmt: skip
    """One call: its answer (None: not JSON), what the model wrote, and what is wrong with it
    (empty: usable)."""
    try:
        response = await streaming.ask(provider, request, sink)
    except StructuredOutputError as exc:  # not JSON at all: the model is told, like a schema break
        env.spent.append(Spend(label, exc.usage, access.prices.cost(request.model, exc.usage)))
        return None, exc.text, ["the answer is not JSON"]
    except ModelError as exc:
        raise StepFailure(
            exc.code,
            f"llm node {node.id!r}: {exc.message}",
            retryable=exc.retryable,
            details={"node": node.id, "model": label, **exc.details},
        ) from None
    usage = response.usage
    env.spent.append(Spend(label, usage, access.prices.cost(response.model or request.model, usage)))
    said = response.message.content
    if node.output_schema is None:
        return response, said, []
    problems = json_schemas.problems(node.output_schema, response.structured, whole="(answer)")
    return response, said, problems[:MAX_PROBLEMS]


def _reask(request: ModelRequest, said: str, problems: list[str]) -> ModelRequest:
    """The request again, with the bad answer and what is wrong with it appended."""
    retry = (
        "Your answer does not match the required JSON Schema:\n- "
        + "\n- ".join(problems)
        + "\nAnswer again with only a JSON object that matches the schema."
    )
    messages = (*request.messages, Message("assistant", said), Message("user", retry))
    return ModelRequest(
        request.model, messages, request.tools, request.output_schema, request.max_output_tokens,
        request.temperature, request.top_p, request.stop,
    )  # fmt: skip


def _output(answer: ModelResponse, node: LlmNode, env: NodeEnv, label: str) -> dict[str, Any]:
    spent = sum(env.spent[1:], env.spent[0])
    output: dict[str, Any] = {
        "text": answer.message.content,
        "model": label,
        "finish_reason": answer.finish_reason,
        "usage": {**spent.usage.__dict__, "usd_cost": round(spent.usd, 6), "calls": spent.calls},
    }
    if node.output_schema is not None:
        output["data"] = answer.structured
    return output
