"""API keys as adapters receive them: a ``SecretStr`` from settings, a plain string, or nothing."""

from __future__ import annotations

from pydantic import SecretStr


def reveal_key(value: SecretStr | str | None) -> str | None:
    """The key's text, or None when no usable key was given (blank counts as none)."""
    text = value.get_secret_value() if isinstance(value, SecretStr) else value
    if text is None or not text.strip():
        return None
    return text.strip()
