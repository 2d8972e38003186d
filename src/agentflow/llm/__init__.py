"""Model providers: one interface over OpenAI, Anthropic, Gemini and a scripted model.

``provider_for("openai:gpt-4o-mini", settings)`` picks one; every provider takes a
``ModelRequest`` and returns a ``ModelResponse`` (``agentflow.core.chat``) and raises only
``ModelError``.
"""

from agentflow.llm.anthropic import AnthropicProvider
from agentflow.llm.base import Embedder, ModelError, ModelProvider
from agentflow.llm.gemini import GeminiProvider
from agentflow.llm.openai import OpenAIProvider
from agentflow.llm.pricing_file import load_price_table
from agentflow.llm.scripted import Rule, ScriptedProvider
from agentflow.llm.select import KNOWN_PROVIDERS, provider_for

__all__ = [
    "KNOWN_PROVIDERS",
    "AnthropicProvider",
    "Embedder",
    "GeminiProvider",
    "ModelError",
    "ModelProvider",
    "OpenAIProvider",
    "Rule",
    "ScriptedProvider",
    "load_price_table",
    "provider_for",
]
