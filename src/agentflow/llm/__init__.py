"""Model providers: one interface over OpenAI, Anthropic, Gemini and a scripted model.

``provider_for("openai:gpt-4o-mini", settings)`` (``agentflow.llm.select``) picks one; every
provider takes a ``ModelRequest`` and returns a ``ModelResponse`` (``agentflow.core.chat``) and
raises only ``ModelError``. The vendor adapters live in ``agentflow.llm.openai``, ``.anthropic``
and ``.gemini``; they are imported when first used, because the SDKs take seconds to import
and most processes (the CLI, workers on the scripted model) never need them.
"""
